/* noop.h: hand-written helpers for the BPF programs noop generates.
 *
 * Included once at the top of every generated program (noop check --emit-c shows
 * the whole text). The event header below must match agent/events.py: the
 * generated code asserts every offset at compile time.
 */
#include <uapi/linux/ptrace.h>

#define NOOP_EFLAGS_ZF 0x40 /* x86 zero flag: set after a compare-and-swap that won */

/* bpf_probe_read_user under a name of noop's own: BCC's front end spends ~55 ms on
 * each call of the helper by its own name (a quarter of a small program's compile)
 * and makes the same instructions of either. */
static long (*noop_probe_read_user)(void *dst, __u32 size, const void *unsafe_ptr) =
	(void *)BPF_FUNC_probe_read_user;

struct noop_hdr {
	u64 ts;      /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	u64 goid;    /* Go goroutine id, when the probe asks for it */
	u32 pid;     /* tgid, as the host sees it */
	u32 tid;
	u16 probe;   /* index of the probe in the plan */
	u16 site;    /* index of the site in the probe */
	u32 faults;  /* bit i: value i could not be read (user memory fault) */
	u32 absent;  /* bit i: value i does not exist (index past a slice's length) */
	u32 _pad;
};

/* An exit probe's call in progress: Go: (g, g.stack.hi - rsp); C, Rust: (pid_tgid, rsp). */
struct noop_callkey {
	u64 a;
	u64 b;
};

/* Strings and byte slices: the full length, then the first bytes. */
#define NOOP_BYTES(cap) struct { u32 len; u32 _pad; char s[cap]; }

static __always_inline int noop_read(void *dst, u32 size, u64 addr)
{
	return noop_probe_read_user(dst, size, (const void *)addr);
}

/* Copy up to cap bytes from user address ptr into s; record the full length n in *len.
 * Go strings are not NUL-terminated: their length comes from the string header.
 * A function, not a statement-expression macro: BCC's front end takes many times
 * longer over the macro's expansions than over calls of an inlined function. */
static __always_inline int noop_copy_n(u32 *len, char *s, u32 cap, u64 ptr, u64 n)
{
	*len = n > 0xffffffffULL ? 0xffffffffU : (u32)n;
	if (n > cap)
		n = cap;
	return n ? noop_probe_read_user(s, n, (const void *)ptr) : 0;
}

#define noop_copy(slot, ptr, n) \
	noop_copy_n(&(slot)->len, (slot)->s, sizeof((slot)->s), (u64)(ptr), (u64)(n))

static __always_inline void noop_header(struct noop_hdr *h, u16 probe, u16 site)
{
	u64 id = bpf_get_current_pid_tgid();

	h->ts = bpf_ktime_get_ns();
	h->goid = 0;
	h->pid = id >> 32;
	h->tid = (u32)id;
	h->probe = probe;
	h->site = site;
	h->faults = 0;
	h->absent = 0;
	h->_pad = 0;
}

/* The goroutine id at g + offset (Go keeps g in r14); 0 when it cannot be read. */
static __always_inline u64 noop_goid(u64 addr)
{
	u64 id = 0;

	noop_probe_read_user(&id, 8, (const void *)addr);
	return id;
}

#include <linux/stddef.h>

_Static_assert(sizeof(struct noop_hdr) == 40, "header layout");
_Static_assert(offsetof(struct noop_hdr, ts) == 0, "header layout");
_Static_assert(offsetof(struct noop_hdr, goid) == 8, "header layout");
_Static_assert(offsetof(struct noop_hdr, pid) == 16, "header layout");
_Static_assert(offsetof(struct noop_hdr, tid) == 20, "header layout");
_Static_assert(offsetof(struct noop_hdr, probe) == 24, "header layout");
_Static_assert(offsetof(struct noop_hdr, site) == 26, "header layout");
_Static_assert(offsetof(struct noop_hdr, faults) == 28, "header layout");
_Static_assert(offsetof(struct noop_hdr, absent) == 32, "header layout");

BPF_RINGBUF_OUTPUT(noop_events, 256);
BPF_PERCPU_ARRAY(noop_produced, u64, 6);  /* per probe: records made */
BPF_PERCPU_ARRAY(noop_lost, u64, 6);  /* per probe: records the ring buffer refused */
BPF_PERCPU_ARRAY(noop_faults, u64, 6);  /* per probe: user-memory read faults */
BPF_PERCPU_ARRAY(noop_unpaired, u64, 6);  /* per exit probe: returns without their call's entry */
BPF_PERCPU_ARRAY(noop_cancelled, u64, 6);  /* per exit probe on an async fn: futures dropped before they completed */

struct noop_trapkey {
	u32 site;
	u32 pid;
};
BPF_PERCPU_HASH(noop_traps, struct noop_trapkey, u64, 255);  /* hits per site and process */
static __always_inline void noop_trap(u32 site)
{
	struct noop_trapkey k = {.site = site, .pid = bpf_get_current_pid_tgid() >> 32};
	u64 *n = noop_traps.lookup(&k);
	if (!n) {
		u64 one = 1;
		if (!noop_traps.insert(&k, &one))
			return;
		n = noop_traps.lookup(&k);  /* another CPU made it meanwhile */
	}
	if (!n) {  /* no room: the site's row of process 0 */
		k.pid = 0;
		n = noop_traps.lookup(&k);
	}
	if (n)
		(*n)++;
}

BPF_ARRAY(noop_only, u32, 1);  /* per target: the one process probed; 0: every one */
static __always_inline int noop_left_out(u32 target)
{
	u32 *only = noop_only.lookup(&target);
	return only && *only && (bpf_get_current_pid_tgid() >> 32) != *only;
}

/* bpf_get_attach_cookie (UAPI helper 174): the site index noop attached the uprobe with */
static u64 (*noop_attach_cookie)(void *ctx) = (void *)174;

struct noop_ev_0 {
	struct noop_hdr hdr;
	NOOP_BYTES(128) v0;         /* metric: m.desc.fqName */
	NOOP_BYTES(32) v1;          /* l0_name: m.labelPairs[0].Name */
	NOOP_BYTES(64) v2;          /* l0_value: m.labelPairs[0].Value */
	NOOP_BYTES(32) v3;          /* l1_name: m.labelPairs[1].Name */
	NOOP_BYTES(64) v4;          /* l1_value: m.labelPairs[1].Value */
	NOOP_BYTES(32) v5;          /* l2_name: m.labelPairs[2].Name */
	NOOP_BYTES(64) v6;          /* l2_value: m.labelPairs[2].Value */
	NOOP_BYTES(32) v7;          /* l3_name: m.labelPairs[3].Name */
	NOOP_BYTES(64) v8;          /* l3_value: m.labelPairs[3].Value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* delta: register (delta) */
	u64 v11;                    /* valInt: m.valInt */
	u64 v12;                    /* valBits: m.valBits */
};
_Static_assert(sizeof(struct noop_ev_0) == 656, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v1) == 176, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v2) == 216, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v3) == 288, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v4) == 328, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v5) == 400, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v6) == 440, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v7) == 512, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v8) == 552, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v9) == 624, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v10) == 632, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v11) == 640, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v12) == 648, "event layout");

/* probe counter_add: github.com/prometheus/client_golang/prometheus.(*counter).AddWithExemplar at 0x…: at the jp before the lock xadd on counter.valInt (the hits it does not branch away from), with the argument as an integer in rcx at +0x82 of github.com/prometheus/client_golang/prometheus.(*counter).AddWithExemplar (jp, emulated) */
int noop_p0_s0(struct pt_regs *ctx)
{
	noop_trap(0);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (ctx->flags & 0x4)  /* the jump here is taken: not a hit (the site's why above says which) */
		return 0;
	int probe_0 = 0;
	u64 *made = noop_produced.lookup(&probe_0);
	if (made)
		(*made)++;
	struct noop_ev_0 *e = noop_events.ringbuf_reserve(sizeof(*e));
	if (!e) {
		u64 *lost = noop_lost.lookup(&probe_0);
		if (lost)
			(*lost)++;
		return 0;
	}
	noop_header(&e->hdr, 0, 0);
	u32 faults = 0, absent = 0;
	/* metric = m.desc.fqName: rax -> *(+32) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&a, 8, a + (32))) { faults |= 0x1; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.labelPairs[0].Name: rax -> [0] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.labelPairs[0].Value: rax -> [0] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x4; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x4; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.labelPairs[1].Name: rax -> [1] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.labelPairs[1].Value: rax -> [1] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x10; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x10; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.labelPairs[2].Name: rax -> [2] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.labelPairs[2].Value: rax -> [2] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x40; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x40; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.labelPairs[3].Name: rax -> [3] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.labelPairs[3].Value: rax -> [3] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x100; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x100; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rax */
	e->v9 = 0;
	e->v9 = ctx->ax;
	/* delta = register (delta): rcx */
	e->v10 = 0;
	e->v10 = ctx->cx;
	/* valInt = m.valInt: rax +8: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v11, 8, a + (8))) { faults |= 0x800; break; }
	} while (0);
	/* valBits = m.valBits: rax +0: 8 bytes */
	e->v12 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v12, 8, a)) { faults |= 0x1000; break; }
	} while (0);
	e->hdr.faults = faults;
	e->hdr.absent = absent;
	if (*(volatile u32 *)&e->hdr.faults) {
		int probe = 0;
		u64 *n = noop_faults.lookup(&probe);
		if (n)
			(*n)++;
	}
	noop_events.ringbuf_submit(e, 0);
	return 0;
}

struct noop_ev_1 {
	struct noop_hdr hdr;
	NOOP_BYTES(128) v0;         /* metric: m.desc.fqName */
	NOOP_BYTES(32) v1;          /* l0_name: m.labelPairs[0].Name */
	NOOP_BYTES(64) v2;          /* l0_value: m.labelPairs[0].Value */
	NOOP_BYTES(32) v3;          /* l1_name: m.labelPairs[1].Name */
	NOOP_BYTES(64) v4;          /* l1_value: m.labelPairs[1].Value */
	NOOP_BYTES(32) v5;          /* l2_name: m.labelPairs[2].Name */
	NOOP_BYTES(64) v6;          /* l2_value: m.labelPairs[2].Value */
	NOOP_BYTES(32) v7;          /* l3_name: m.labelPairs[3].Name */
	NOOP_BYTES(64) v8;          /* l3_value: m.labelPairs[3].Value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* before: register (before) */
	u64 v11;                    /* valInt: m.valInt */
	u64 v12;                    /* valBits: m.valBits */
};
_Static_assert(sizeof(struct noop_ev_1) == 656, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v1) == 176, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v2) == 216, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v3) == 288, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v4) == 328, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v5) == 400, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v6) == 440, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v7) == 512, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v8) == 552, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v9) == 624, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v10) == 632, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v11) == 640, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v12) == 648, "event layout");

/* probe counter_int: github.com/prometheus/client_golang/prometheus.(*counter).Inc at 0x…: after the lock xadd on counter.valInt at 0x… (and every site of its shape) */
int noop_p1_s0(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	u64 noop_reg0 = 0, noop_reg1 = 0;  /* the registers this site's values are in */
	{
		volatile u64 noop_ax = ctx->ax, noop_bx = ctx->bx, noop_cx = ctx->cx, noop_di = ctx->di;
		switch (site) {
		case 0: case 1: noop_reg0 = noop_ax; noop_reg1 = noop_cx; break;
		case 2: noop_reg0 = noop_bx; noop_reg1 = noop_di; break;
		}
	}
	noop_trap(1 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	int probe_1 = 1;
	u64 *made = noop_produced.lookup(&probe_1);
	if (made)
		(*made)++;
	struct noop_ev_1 *e = noop_events.ringbuf_reserve(sizeof(*e));
	if (!e) {
		u64 *lost = noop_lost.lookup(&probe_1);
		if (lost)
			(*lost)++;
		return 0;
	}
	noop_header(&e->hdr, 1, site);
	u32 faults = 0, absent = 0;
	/* metric = m.desc.fqName: noop_reg0 -> *(+32) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = noop_reg0;
		if (noop_read(&a, 8, a + (32))) { faults |= 0x1; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.labelPairs[0].Name: noop_reg0 -> [0] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.labelPairs[0].Value: noop_reg0 -> [0] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x4; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x4; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.labelPairs[1].Name: noop_reg0 -> [1] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.labelPairs[1].Value: noop_reg0 -> [1] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x10; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x10; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.labelPairs[2].Name: noop_reg0 -> [2] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.labelPairs[2].Value: noop_reg0 -> [2] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x40; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x40; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.labelPairs[3].Name: noop_reg0 -> [3] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.labelPairs[3].Value: noop_reg0 -> [3] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x100; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x100; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: noop_reg0 */
	e->v9 = 0;
	e->v9 = noop_reg0;
	/* before = register (before): noop_reg1 */
	e->v10 = 0;
	e->v10 = noop_reg1;
	/* valInt = m.valInt: noop_reg0 +8: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = noop_reg0;
		if (noop_read(&e->v11, 8, a + (8))) { faults |= 0x800; break; }
	} while (0);
	/* valBits = m.valBits: noop_reg0 +0: 8 bytes */
	e->v12 = 0;
	do {
		u64 a = 0;
		a = noop_reg0;
		if (noop_read(&e->v12, 8, a)) { faults |= 0x1000; break; }
	} while (0);
	e->hdr.faults = faults;
	e->hdr.absent = absent;
	if (*(volatile u32 *)&e->hdr.faults) {
		int probe = 1;
		u64 *n = noop_faults.lookup(&probe);
		if (n)
			(*n)++;
	}
	noop_events.ringbuf_submit(e, 0);
	return 0;
}

struct noop_ev_2 {
	struct noop_hdr hdr;
	NOOP_BYTES(128) v0;         /* metric: m.desc.fqName */
	NOOP_BYTES(32) v1;          /* l0_name: m.labelPairs[0].Name */
	NOOP_BYTES(64) v2;          /* l0_value: m.labelPairs[0].Value */
	NOOP_BYTES(32) v3;          /* l1_name: m.labelPairs[1].Name */
	NOOP_BYTES(64) v4;          /* l1_value: m.labelPairs[1].Value */
	NOOP_BYTES(32) v5;          /* l2_name: m.labelPairs[2].Name */
	NOOP_BYTES(64) v6;          /* l2_value: m.labelPairs[2].Value */
	NOOP_BYTES(32) v7;          /* l3_name: m.labelPairs[3].Name */
	NOOP_BYTES(64) v8;          /* l3_value: m.labelPairs[3].Value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* old: register (old) */
	u64 v11;                    /* new: register (new) */
	u64 v12;                    /* valInt: m.valInt */
};
_Static_assert(sizeof(struct noop_ev_2) == 656, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v1) == 176, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v2) == 216, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v3) == 288, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v4) == 328, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v5) == 400, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v6) == 440, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v7) == 512, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v8) == 552, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v9) == 624, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v10) == 632, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v11) == 640, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v12) == 648, "event layout");

/* probe counter_float: github.com/prometheus/client_golang/prometheus.(*counter).Add at 0x…: after the lock cmpxchg on counter.valBits at 0x…, at the je after its sete and test (ZF clear) (and every site of its shape) */
int noop_p2_s0(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	u64 noop_reg0 = 0;  /* the registers this site's values are in */
	{
		volatile u64 noop_bx = ctx->bx, noop_si = ctx->si;
		switch (site) {
		case 0: noop_reg0 = noop_bx; break;
		case 1: noop_reg0 = noop_si; break;
		}
	}
	noop_trap(4 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (ctx->flags & 0x40)  /* the jump here is taken: not a hit (the site's why above says which) */
		return 0;
	int probe_2 = 2;
	u64 *made = noop_produced.lookup(&probe_2);
	if (made)
		(*made)++;
	struct noop_ev_2 *e = noop_events.ringbuf_reserve(sizeof(*e));
	if (!e) {
		u64 *lost = noop_lost.lookup(&probe_2);
		if (lost)
			(*lost)++;
		return 0;
	}
	noop_header(&e->hdr, 2, site);
	u32 faults = 0, absent = 0;
	/* metric = m.desc.fqName: noop_reg0 -> *(+32) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = noop_reg0;
		if (noop_read(&a, 8, a + (32))) { faults |= 0x1; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.labelPairs[0].Name: noop_reg0 -> [0] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.labelPairs[0].Value: noop_reg0 -> [0] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x4; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x4; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.labelPairs[1].Name: noop_reg0 -> [1] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.labelPairs[1].Value: noop_reg0 -> [1] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x10; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x10; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.labelPairs[2].Name: noop_reg0 -> [2] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.labelPairs[2].Value: noop_reg0 -> [2] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x40; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x40; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.labelPairs[3].Name: noop_reg0 -> [3] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.labelPairs[3].Value: noop_reg0 -> [3] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x100; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x100; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: noop_reg0 */
	e->v9 = 0;
	e->v9 = noop_reg0;
	/* old = register (old): rax */
	e->v10 = 0;
	e->v10 = ctx->ax;
	/* new = register (new): rdx */
	e->v11 = 0;
	e->v11 = ctx->dx;
	/* valInt = m.valInt: noop_reg0 +8: 8 bytes */
	e->v12 = 0;
	do {
		u64 a = 0;
		a = noop_reg0;
		if (noop_read(&e->v12, 8, a + (8))) { faults |= 0x1000; break; }
	} while (0);
	e->hdr.faults = faults;
	e->hdr.absent = absent;
	if (*(volatile u32 *)&e->hdr.faults) {
		int probe = 2;
		u64 *n = noop_faults.lookup(&probe);
		if (n)
			(*n)++;
	}
	noop_events.ringbuf_submit(e, 0);
	return 0;
}

/* probe counter_float: github.com/prometheus/client_golang/prometheus.(*goCollector).Collect at 0x…: after the lock cmpxchg on counter.valBits at 0x… (Add inlined into github.com/prometheus/client_golang/prometheus.(*goCollector).Collect) (and every site of its shape) */
int noop_p2_s2(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(4 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */
		return 0;
	int probe_2 = 2;
	u64 *made = noop_produced.lookup(&probe_2);
	if (made)
		(*made)++;
	struct noop_ev_2 *e = noop_events.ringbuf_reserve(sizeof(*e));
	if (!e) {
		u64 *lost = noop_lost.lookup(&probe_2);
		if (lost)
			(*lost)++;
		return 0;
	}
	noop_header(&e->hdr, 2, site);
	u32 faults = 0, absent = 0;
	/* metric = m.desc.fqName: rbx -> *(+32) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->bx;
		if (noop_read(&a, 8, a + (32))) { faults |= 0x1; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.labelPairs[0].Name: rbx -> [0] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.labelPairs[0].Value: rbx -> [0] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x4; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x4; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.labelPairs[1].Name: rbx -> [1] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.labelPairs[1].Value: rbx -> [1] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x10; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x10; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.labelPairs[2].Name: rbx -> [2] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.labelPairs[2].Value: rbx -> [2] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x40; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x40; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.labelPairs[3].Name: rbx -> [3] of slice at +40 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.labelPairs[3].Value: rbx -> [3] of slice at +40 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (40))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x100; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x100; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rbx */
	e->v9 = 0;
	e->v9 = ctx->bx;
	/* old = register (old): rax */
	e->v10 = 0;
	e->v10 = ctx->ax;
	/* new = register (new): r9 */
	e->v11 = 0;
	e->v11 = ctx->r9;
	/* valInt = m.valInt: rbx +8: 8 bytes */
	e->v12 = 0;
	do {
		u64 a = 0;
		a = ctx->bx;
		if (noop_read(&e->v12, 8, a + (8))) { faults |= 0x1000; break; }
	} while (0);
	e->hdr.faults = faults;
	e->hdr.absent = absent;
	if (*(volatile u32 *)&e->hdr.faults) {
		int probe = 2;
		u64 *n = noop_faults.lookup(&probe);
		if (n)
			(*n)++;
	}
	noop_events.ringbuf_submit(e, 0);
	return 0;
}

struct noop_ev_3 {
	struct noop_hdr hdr;
	NOOP_BYTES(128) v0;         /* metric: m.desc.fqName */
	NOOP_BYTES(32) v1;          /* l0_name: m.labelPairs[0].Name */
	NOOP_BYTES(64) v2;          /* l0_value: m.labelPairs[0].Value */
	NOOP_BYTES(32) v3;          /* l1_name: m.labelPairs[1].Name */
	NOOP_BYTES(64) v4;          /* l1_value: m.labelPairs[1].Value */
	NOOP_BYTES(32) v5;          /* l2_name: m.labelPairs[2].Name */
	NOOP_BYTES(64) v6;          /* l2_value: m.labelPairs[2].Value */
	NOOP_BYTES(32) v7;          /* l3_name: m.labelPairs[3].Name */
	NOOP_BYTES(64) v8;          /* l3_value: m.labelPairs[3].Value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* old: register (old) */
	u64 v11;                    /* new: register (new) */
};
_Static_assert(sizeof(struct noop_ev_3) == 648, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v1) == 176, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v2) == 216, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v3) == 288, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v4) == 328, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v5) == 400, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v6) == 440, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v7) == 512, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v8) == 552, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v9) == 624, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v10) == 632, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v11) == 640, "event layout");

/* probe gauge_add: github.com/prometheus/client_golang/prometheus.(*gauge).Inc at 0x…: after the lock cmpxchg on gauge.valBits at 0x…, at the je after its sete and test (ZF clear) (and every site of its shape) */
int noop_p3_s0(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(7 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (ctx->flags & 0x40)  /* the jump here is taken: not a hit (the site's why above says which) */
		return 0;
	int probe_3 = 3;
	u64 *made = noop_produced.lookup(&probe_3);
	if (made)
		(*made)++;
	struct noop_ev_3 *e = noop_events.ringbuf_reserve(sizeof(*e));
	if (!e) {
		u64 *lost = noop_lost.lookup(&probe_3);
		if (lost)
			(*lost)++;
		return 0;
	}
	noop_header(&e->hdr, 3, site);
	u32 faults = 0, absent = 0;
	/* metric = m.desc.fqName: rbx -> *(+24) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->bx;
		if (noop_read(&a, 8, a + (24))) { faults |= 0x1; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.labelPairs[0].Name: rbx -> [0] of slice at +32 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.labelPairs[0].Value: rbx -> [0] of slice at +32 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x4; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x4; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.labelPairs[1].Name: rbx -> [1] of slice at +32 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.labelPairs[1].Value: rbx -> [1] of slice at +32 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x10; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x10; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.labelPairs[2].Name: rbx -> [2] of slice at +32 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.labelPairs[2].Value: rbx -> [2] of slice at +32 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x40; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x40; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.labelPairs[3].Name: rbx -> [3] of slice at +32 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.labelPairs[3].Value: rbx -> [3] of slice at +32 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->bx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x100; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x100; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rbx */
	e->v9 = 0;
	e->v9 = ctx->bx;
	/* old = register (old): rax */
	e->v10 = 0;
	e->v10 = ctx->ax;
	/* new = register (new): rdx */
	e->v11 = 0;
	e->v11 = ctx->dx;
	e->hdr.faults = faults;
	e->hdr.absent = absent;
	if (*(volatile u32 *)&e->hdr.faults) {
		int probe = 3;
		u64 *n = noop_faults.lookup(&probe);
		if (n)
			(*n)++;
	}
	noop_events.ringbuf_submit(e, 0);
	return 0;
}

struct noop_ev_4 {
	struct noop_hdr hdr;
	NOOP_BYTES(128) v0;         /* metric: m.desc.fqName */
	NOOP_BYTES(32) v1;          /* l0_name: m.labelPairs[0].Name */
	NOOP_BYTES(64) v2;          /* l0_value: m.labelPairs[0].Value */
	NOOP_BYTES(32) v3;          /* l1_name: m.labelPairs[1].Name */
	NOOP_BYTES(64) v4;          /* l1_value: m.labelPairs[1].Value */
	NOOP_BYTES(32) v5;          /* l2_name: m.labelPairs[2].Name */
	NOOP_BYTES(64) v6;          /* l2_value: m.labelPairs[2].Value */
	NOOP_BYTES(32) v7;          /* l3_name: m.labelPairs[3].Name */
	NOOP_BYTES(64) v8;          /* l3_value: m.labelPairs[3].Value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* new: register (new) */
	u64 v11;                    /* valBits: m.valBits */
};
_Static_assert(sizeof(struct noop_ev_4) == 648, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v1) == 176, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v2) == 216, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v3) == 288, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v4) == 328, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v5) == 400, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v6) == 440, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v7) == 512, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v8) == 552, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v9) == 624, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v10) == 632, "event layout");
_Static_assert(offsetof(struct noop_ev_4, v11) == 640, "event layout");

/* probe gauge_set: github.com/prometheus/client_golang/prometheus.(*gauge).Set at 0x…: at the xchg on gauge.valBits at 0x… (and every site of its shape) */
int noop_p4_s0(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	u64 noop_reg0 = 0, noop_reg1 = 0;  /* the registers this site's values are in */
	{
		volatile u64 noop_ax = ctx->ax, noop_bx = ctx->bx, noop_cx = ctx->cx;
		switch (site) {
		case 0: noop_reg0 = noop_ax; noop_reg1 = noop_cx; break;
		case 1: noop_reg0 = noop_cx; noop_reg1 = noop_ax; break;
		case 2: noop_reg0 = noop_bx; noop_reg1 = noop_cx; break;
		}
	}
	noop_trap(11 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	int probe_4 = 4;
	u64 *made = noop_produced.lookup(&probe_4);
	if (made)
		(*made)++;
	struct noop_ev_4 *e = noop_events.ringbuf_reserve(sizeof(*e));
	if (!e) {
		u64 *lost = noop_lost.lookup(&probe_4);
		if (lost)
			(*lost)++;
		return 0;
	}
	noop_header(&e->hdr, 4, site);
	u32 faults = 0, absent = 0;
	/* metric = m.desc.fqName: noop_reg0 -> *(+24) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = noop_reg0;
		if (noop_read(&a, 8, a + (24))) { faults |= 0x1; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.labelPairs[0].Name: noop_reg0 -> [0] of slice at +32 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.labelPairs[0].Value: noop_reg0 -> [0] of slice at +32 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x4; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x4; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.labelPairs[1].Name: noop_reg0 -> [1] of slice at +32 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.labelPairs[1].Value: noop_reg0 -> [1] of slice at +32 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x10; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x10; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.labelPairs[2].Name: noop_reg0 -> [2] of slice at +32 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.labelPairs[2].Value: noop_reg0 -> [2] of slice at +32 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x40; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x40; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.labelPairs[3].Name: noop_reg0 -> [3] of slice at +32 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.labelPairs[3].Value: noop_reg0 -> [3] of slice at +32 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = noop_reg0;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (32))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x100; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x100; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: noop_reg0 */
	e->v9 = 0;
	e->v9 = noop_reg0;
	/* new = register (new): noop_reg1 */
	e->v10 = 0;
	e->v10 = noop_reg1;
	/* valBits = m.valBits: noop_reg0 +0: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = noop_reg0;
		if (noop_read(&e->v11, 8, a)) { faults |= 0x800; break; }
	} while (0);
	e->hdr.faults = faults;
	e->hdr.absent = absent;
	if (*(volatile u32 *)&e->hdr.faults) {
		int probe = 4;
		u64 *n = noop_faults.lookup(&probe);
		if (n)
			(*n)++;
	}
	noop_events.ringbuf_submit(e, 0);
	return 0;
}

struct noop_ev_5 {
	struct noop_hdr hdr;
	NOOP_BYTES(128) v0;         /* metric: m.desc.fqName */
	NOOP_BYTES(32) v1;          /* l0_name: m.labelPairs[0].Name */
	NOOP_BYTES(64) v2;          /* l0_value: m.labelPairs[0].Value */
	NOOP_BYTES(32) v3;          /* l1_name: m.labelPairs[1].Name */
	NOOP_BYTES(64) v4;          /* l1_value: m.labelPairs[1].Value */
	NOOP_BYTES(32) v5;          /* l2_name: m.labelPairs[2].Name */
	NOOP_BYTES(64) v6;          /* l2_value: m.labelPairs[2].Value */
	NOOP_BYTES(32) v7;          /* l3_name: m.labelPairs[3].Name */
	NOOP_BYTES(64) v8;          /* l3_value: m.labelPairs[3].Value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* before: register (before) */
	u64 v11;                    /* observed: v */
};
_Static_assert(sizeof(struct noop_ev_5) == 648, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v1) == 176, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v2) == 216, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v3) == 288, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v4) == 328, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v5) == 400, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v6) == 440, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v7) == 512, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v8) == 552, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v9) == 624, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v10) == 632, "event layout");
_Static_assert(offsetof(struct noop_ev_5, v11) == 640, "event layout");

/* probe histogram: github.com/prometheus/client_golang/prometheus.(*histogram).observe at 0x…: after the lock xadd on histogram.countAndHotIdx at 0x… */
int noop_p5_s0(struct pt_regs *ctx)
{
	noop_trap(14);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	int probe_5 = 5;
	u64 *made = noop_produced.lookup(&probe_5);
	if (made)
		(*made)++;
	struct noop_ev_5 *e = noop_events.ringbuf_reserve(sizeof(*e));
	if (!e) {
		u64 *lost = noop_lost.lookup(&probe_5);
		if (lost)
			(*lost)++;
		return 0;
	}
	noop_header(&e->hdr, 5, 0);
	u32 faults = 0, absent = 0;
	/* metric = m.desc.fqName: rax -> *(+24) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&a, 8, a + (24))) { faults |= 0x1; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.labelPairs[0].Name: rax -> [0] of slice at +80 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (80))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x2; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.labelPairs[0].Value: rax -> [0] of slice at +80 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (80))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x4; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x4; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.labelPairs[1].Name: rax -> [1] of slice at +80 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (80))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x8; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.labelPairs[1].Value: rax -> [1] of slice at +80 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (80))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 8;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x10; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x10; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.labelPairs[2].Name: rax -> [2] of slice at +80 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (80))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x20; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.labelPairs[2].Value: rax -> [2] of slice at +80 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (80))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 16;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x40; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x40; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.labelPairs[3].Name: rax -> [3] of slice at +80 (elem 8) -> *(+0) -> *(+0) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (80))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		if (noop_read(&a, 8, a + (0))) { faults |= 0x80; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.labelPairs[3].Value: rax -> [3] of slice at +80 (elem 8) -> *(+0) -> *(+8) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (80))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 24;
		}
		if (noop_read(&a, 8, a + (0))) { faults |= 0x100; break; }
		if (noop_read(&a, 8, a + (8))) { faults |= 0x100; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rax */
	e->v9 = 0;
	e->v9 = ctx->ax;
	/* before = register (before): rsi */
	e->v10 = 0;
	e->v10 = ctx->si;
	/* observed = v: sp+80 +0: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = ctx->sp + (80);
		if (noop_read(&e->v11, 8, a)) { faults |= 0x800; break; }
	} while (0);
	e->hdr.faults = faults;
	e->hdr.absent = absent;
	if (*(volatile u32 *)&e->hdr.faults) {
		int probe = 5;
		u64 *n = noop_faults.lookup(&probe);
		if (n)
			(*n)++;
	}
	noop_events.ringbuf_submit(e, 0);
	return 0;
}

