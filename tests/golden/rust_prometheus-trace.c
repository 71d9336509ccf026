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
BPF_PERCPU_ARRAY(noop_produced, u64, 5);  /* per probe: records made */
BPF_PERCPU_ARRAY(noop_lost, u64, 5);  /* per probe: records the ring buffer refused */
BPF_PERCPU_ARRAY(noop_faults, u64, 5);  /* per probe: user-memory read faults */
BPF_PERCPU_ARRAY(noop_unpaired, u64, 5);  /* per exit probe: returns without their call's entry */
BPF_PERCPU_ARRAY(noop_cancelled, u64, 5);  /* per exit probe on an async fn: futures dropped before they completed */

struct noop_trapkey {
	u32 site;
	u32 pid;
};
BPF_PERCPU_HASH(noop_traps, struct noop_trapkey, u64, 323);  /* hits per site and process */
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
	NOOP_BYTES(128) v0;         /* metric: m.desc.fq_name */
	NOOP_BYTES(32) v1;          /* l0_name: m.label_pairs[0].name */
	NOOP_BYTES(64) v2;          /* l0_value: m.label_pairs[0].value */
	NOOP_BYTES(32) v3;          /* l1_name: m.label_pairs[1].name */
	NOOP_BYTES(64) v4;          /* l1_value: m.label_pairs[1].value */
	NOOP_BYTES(32) v5;          /* l2_name: m.label_pairs[2].name */
	NOOP_BYTES(64) v6;          /* l2_value: m.label_pairs[2].value */
	NOOP_BYTES(32) v7;          /* l3_name: m.label_pairs[3].name */
	NOOP_BYTES(64) v8;          /* l3_value: m.label_pairs[3].value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* delta: the increment */
	u64 v11;                    /* value: the value after the update */
	u64 v12;                    /* before: the value before the update */
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

/* probe counter_u64: rust_prometheus::Metrics::tick at 0x…: after the lock inc on the counter's value at 0x… (the kernel refuses a LOCK instruction): the value read back from memory, the increment from the instruction (and every site of its shape) */
int noop_p0_s0(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(0 + site);
	if (noop_left_out(0))  /* --pid: another process */
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
	noop_header(&e->hdr, 0, site);
	u32 faults = 0, absent = 0;
	/* metric = m.desc.fq_name: rax +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rax -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rax -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rax -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rax -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rax -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rax -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rax -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rax -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rax +16 */
	e->v9 = 0;
	e->v9 = ctx->ax + (16);
	/* delta = the increment: the constant 0x1 (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0x1ULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rax +152: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v11, 8, a + (152))) { faults |= 0x800; break; }
	} while (0);
	/* before = the value before the update: unavailable: not held anywhere at this site */
	e->v12 = 0;
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

/* probe counter_u64: rust_prometheus::Metrics::tick at 0x…: after the lock add on the counter's value at 0x… (the kernel refuses a LOCK instruction): the value read back from memory, the increment from the instruction (and every site of its shape) */
int noop_p0_s3(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(0 + site);
	if (noop_left_out(0))  /* --pid: another process */
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
	noop_header(&e->hdr, 0, site);
	u32 faults = 0, absent = 0;
	/* metric = m.desc.fq_name: rax +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rax -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rax -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rax -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rax -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rax -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rax -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rax -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rax -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rax +16 */
	e->v9 = 0;
	e->v9 = ctx->ax + (16);
	/* delta = the increment: the constant 0x3 (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0x3ULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rax +152: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v11, 8, a + (152))) { faults |= 0x800; break; }
	} while (0);
	/* before = the value before the update: unavailable: not held anywhere at this site */
	e->v12 = 0;
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
	NOOP_BYTES(128) v0;         /* metric: m.desc.fq_name */
	NOOP_BYTES(32) v1;          /* l0_name: m.label_pairs[0].name */
	NOOP_BYTES(64) v2;          /* l0_value: m.label_pairs[0].value */
	NOOP_BYTES(32) v3;          /* l1_name: m.label_pairs[1].name */
	NOOP_BYTES(64) v4;          /* l1_value: m.label_pairs[1].value */
	NOOP_BYTES(32) v5;          /* l2_name: m.label_pairs[2].name */
	NOOP_BYTES(64) v6;          /* l2_value: m.label_pairs[2].value */
	NOOP_BYTES(32) v7;          /* l3_name: m.label_pairs[3].name */
	NOOP_BYTES(64) v8;          /* l3_value: m.label_pairs[3].value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* delta: the increment */
	u64 v11;                    /* value: the value after the update */
	u64 v12;                    /* before: the value before the update */
	u64 v13;                    /* now: the field just after the update */
};
_Static_assert(sizeof(struct noop_ev_1) == 664, "event layout");
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
_Static_assert(offsetof(struct noop_ev_1, v13) == 656, "event layout");

/* probe counter_f64: rust_prometheus::Metrics::tick at 0x…: after the lock cmpxchg on the counter's value at 0x…: a successful swap (ZF), old bits in rax, new in rdx, the increment a constant of the loop (and every site of its shape) */
int noop_p1_s0(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(5 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */
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
	/* metric = m.desc.fq_name: rcx +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->cx;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rcx -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rcx -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rcx -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rcx -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rcx -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rcx -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rcx -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rcx -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rcx +16 */
	e->v9 = 0;
	e->v9 = ctx->cx + (16);
	/* delta = the increment: the constant 0x… (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0x3fd0000000000000ULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rdx */
	e->v11 = 0;
	e->v11 = ctx->dx;
	/* before = the value before the update: rax */
	e->v12 = 0;
	e->v12 = ctx->ax;
	/* now = the field just after the update: rcx +152: 8 bytes */
	e->v13 = 0;
	do {
		u64 a = 0;
		a = ctx->cx;
		if (noop_read(&e->v13, 8, a + (152))) { faults |= 0x2000; break; }
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

/* probe counter_f64: rust_prometheus::Metrics::tick at 0x…: after the lock cmpxchg on the counter's value at 0x…: a successful swap (ZF), old bits in rax, new in rdx (and every site of its shape) */
int noop_p1_s1(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(5 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */
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
	/* metric = m.desc.fq_name: rcx +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->cx;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rcx -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rcx -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rcx -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rcx -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rcx -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rcx -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rcx -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rcx -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rcx +16 */
	e->v9 = 0;
	e->v9 = ctx->cx + (16);
	/* delta = the increment: unavailable: computed at run time: the increment is new - old */
	e->v10 = 0;
	/* value = the value after the update: rdx */
	e->v11 = 0;
	e->v11 = ctx->dx;
	/* before = the value before the update: rax */
	e->v12 = 0;
	e->v12 = ctx->ax;
	/* now = the field just after the update: rcx +152: 8 bytes */
	e->v13 = 0;
	do {
		u64 a = 0;
		a = ctx->cx;
		if (noop_read(&e->v13, 8, a + (152))) { faults |= 0x2000; break; }
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
	NOOP_BYTES(128) v0;         /* metric: m.desc.fq_name */
	NOOP_BYTES(32) v1;          /* l0_name: m.label_pairs[0].name */
	NOOP_BYTES(64) v2;          /* l0_value: m.label_pairs[0].value */
	NOOP_BYTES(32) v3;          /* l1_name: m.label_pairs[1].name */
	NOOP_BYTES(64) v4;          /* l1_value: m.label_pairs[1].value */
	NOOP_BYTES(32) v5;          /* l2_name: m.label_pairs[2].name */
	NOOP_BYTES(64) v6;          /* l2_value: m.label_pairs[2].value */
	NOOP_BYTES(32) v7;          /* l3_name: m.label_pairs[3].name */
	NOOP_BYTES(64) v8;          /* l3_value: m.label_pairs[3].value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* delta: the increment */
	u64 v11;                    /* value: the value after the update */
	u64 v12;                    /* before: the value before the update */
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

/* probe gauge_i64: rust_prometheus::Metrics::tick at 0x…: after the lock dec on the gauge's value at 0x… (the kernel refuses a LOCK instruction): the value read back from memory, the increment from the instruction (and every site of its shape) */
int noop_p2_s0(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(7 + site);
	if (noop_left_out(0))  /* --pid: another process */
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
	/* metric = m.desc.fq_name: rax +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rax -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rax -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rax -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rax -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rax -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rax -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rax -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rax -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rax +16 */
	e->v9 = 0;
	e->v9 = ctx->ax + (16);
	/* delta = the increment: the constant 0x… (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0xffffffffffffffffULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rax +152: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v11, 8, a + (152))) { faults |= 0x800; break; }
	} while (0);
	/* before = the value before the update: unavailable: not held anywhere at this site */
	e->v12 = 0;
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

/* probe gauge_i64: rust_prometheus::Metrics::tick at 0x…: at the store of the new value (mov on the gauge's value at 0x…) from rbx (and every site of its shape) */
int noop_p2_s1(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(7 + site);
	if (noop_left_out(0))  /* --pid: another process */
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
	/* metric = m.desc.fq_name: rax +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rax -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rax -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rax -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rax -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rax -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rax -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rax -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rax -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rax +16 */
	e->v9 = 0;
	e->v9 = ctx->ax + (16);
	/* delta = the increment: unavailable: not held anywhere at this site */
	e->v10 = 0;
	/* value = the value after the update: rbx */
	e->v11 = 0;
	e->v11 = ctx->bx;
	/* before = the value before the update: rax +152: 8 bytes */
	e->v12 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v12, 8, a + (152))) { faults |= 0x1000; break; }
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

/* probe gauge_i64: rust_prometheus::Metrics::tick at 0x…: after the lock add on the gauge's value at 0x… (the kernel refuses a LOCK instruction): the value read back from memory, the increment from the instruction (and every site of its shape) */
int noop_p2_s3(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(7 + site);
	if (noop_left_out(0))  /* --pid: another process */
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
	/* metric = m.desc.fq_name: rax +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rax -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rax -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rax -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rax -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rax -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rax -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rax -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rax -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rax +16 */
	e->v9 = 0;
	e->v9 = ctx->ax + (16);
	/* delta = the increment: the constant 0x4 (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0x4ULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rax +152: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v11, 8, a + (152))) { faults |= 0x800; break; }
	} while (0);
	/* before = the value before the update: unavailable: not held anywhere at this site */
	e->v12 = 0;
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

/* probe gauge_i64: rust_prometheus::Metrics::tick at 0x…: after the lock inc on the gauge's value at 0x… (the kernel refuses a LOCK instruction): the value read back from memory, the increment from the instruction (and every site of its shape) */
int noop_p2_s4(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(7 + site);
	if (noop_left_out(0))  /* --pid: another process */
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
	/* metric = m.desc.fq_name: rax +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rax -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rax -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rax -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rax -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rax -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rax -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rax -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rax -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rax +16 */
	e->v9 = 0;
	e->v9 = ctx->ax + (16);
	/* delta = the increment: the constant 0x1 (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0x1ULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rax +152: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v11, 8, a + (152))) { faults |= 0x800; break; }
	} while (0);
	/* before = the value before the update: unavailable: not held anywhere at this site */
	e->v12 = 0;
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
	NOOP_BYTES(128) v0;         /* metric: m.desc.fq_name */
	NOOP_BYTES(32) v1;          /* l0_name: m.label_pairs[0].name */
	NOOP_BYTES(64) v2;          /* l0_value: m.label_pairs[0].value */
	NOOP_BYTES(32) v3;          /* l1_name: m.label_pairs[1].name */
	NOOP_BYTES(64) v4;          /* l1_value: m.label_pairs[1].value */
	NOOP_BYTES(32) v5;          /* l2_name: m.label_pairs[2].name */
	NOOP_BYTES(64) v6;          /* l2_value: m.label_pairs[2].value */
	NOOP_BYTES(32) v7;          /* l3_name: m.label_pairs[3].name */
	NOOP_BYTES(64) v8;          /* l3_value: m.label_pairs[3].value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* delta: the increment */
	u64 v11;                    /* value: the value after the update */
	u64 v12;                    /* before: the value before the update */
	u64 v13;                    /* now: the field just after the update */
};
_Static_assert(sizeof(struct noop_ev_3) == 664, "event layout");
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
_Static_assert(offsetof(struct noop_ev_3, v12) == 648, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v13) == 656, "event layout");

/* probe gauge_f64: rust_prometheus::Metrics::tick at 0x…: after the lock cmpxchg on the gauge's value at 0x…: a successful swap (ZF), old bits in rax, new in rdx, the increment a constant of the loop (and every site of its shape) */
int noop_p3_s0(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(12 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */
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
	/* metric = m.desc.fq_name: rcx +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->cx;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rcx -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rcx -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rcx -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rcx -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rcx -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rcx -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rcx -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rcx -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rcx +16 */
	e->v9 = 0;
	e->v9 = ctx->cx + (16);
	/* delta = the increment: the constant 0x… (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0x3ff0000000000000ULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rdx */
	e->v11 = 0;
	e->v11 = ctx->dx;
	/* before = the value before the update: rax */
	e->v12 = 0;
	e->v12 = ctx->ax;
	/* now = the field just after the update: rcx +152: 8 bytes */
	e->v13 = 0;
	do {
		u64 a = 0;
		a = ctx->cx;
		if (noop_read(&e->v13, 8, a + (152))) { faults |= 0x2000; break; }
	} while (0);
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

/* probe gauge_f64: rust_prometheus::Metrics::tick at 0x…: after the lock cmpxchg on the gauge's value at 0x…: a successful swap (ZF), old bits in rax, new in rdx, the increment a constant of the loop (and every site of its shape) */
int noop_p3_s1(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(12 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */
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
	/* metric = m.desc.fq_name: rcx +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->cx;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rcx -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rcx -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rcx -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rcx -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rcx -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rcx -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rcx -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rcx -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rcx +16 */
	e->v9 = 0;
	e->v9 = ctx->cx + (16);
	/* delta = the increment: the constant 0x… (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0x4014000000000000ULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rdx */
	e->v11 = 0;
	e->v11 = ctx->dx;
	/* before = the value before the update: rax */
	e->v12 = 0;
	e->v12 = ctx->ax;
	/* now = the field just after the update: rcx +152: 8 bytes */
	e->v13 = 0;
	do {
		u64 a = 0;
		a = ctx->cx;
		if (noop_read(&e->v13, 8, a + (152))) { faults |= 0x2000; break; }
	} while (0);
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

/* probe gauge_f64: rust_prometheus::Metrics::tick at 0x…: after the lock cmpxchg on the gauge's value at 0x…: a successful swap (ZF), old bits in rax, new in rdx, the increment a constant of the loop (and every site of its shape) */
int noop_p3_s2(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(12 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */
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
	/* metric = m.desc.fq_name: rcx +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->cx;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rcx -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rcx -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rcx -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rcx -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rcx -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rcx -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rcx -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rcx -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rcx +16 */
	e->v9 = 0;
	e->v9 = ctx->cx + (16);
	/* delta = the increment: the constant 0x… (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0xc01c000000000000ULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rdx */
	e->v11 = 0;
	e->v11 = ctx->dx;
	/* before = the value before the update: rax */
	e->v12 = 0;
	e->v12 = ctx->ax;
	/* now = the field just after the update: rcx +152: 8 bytes */
	e->v13 = 0;
	do {
		u64 a = 0;
		a = ctx->cx;
		if (noop_read(&e->v13, 8, a + (152))) { faults |= 0x2000; break; }
	} while (0);
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

/* probe gauge_f64: rust_prometheus::Metrics::tick at 0x…: after the store of the new value (movsd on the gauge's value at 0x…), read back from memory (and every site of its shape) */
int noop_p3_s3(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(12 + site);
	if (noop_left_out(0))  /* --pid: another process */
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
	/* metric = m.desc.fq_name: rax +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rax -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rax -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rax -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rax -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rax -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rax -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rax -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rax -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rax +16 */
	e->v9 = 0;
	e->v9 = ctx->ax + (16);
	/* delta = the increment: unavailable: not held anywhere at this site */
	e->v10 = 0;
	/* value = the value after the update: rax +152: 8 bytes */
	e->v11 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v11, 8, a + (152))) { faults |= 0x800; break; }
	} while (0);
	/* before = the value before the update: unavailable: not held anywhere at this site */
	e->v12 = 0;
	/* now = the field just after the update: rax +152: 8 bytes */
	e->v13 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v13, 8, a + (152))) { faults |= 0x2000; break; }
	} while (0);
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

/* probe gauge_f64: rust_prometheus::Metrics::tick at 0x…: after the lock cmpxchg on the gauge's value at 0x…: a successful swap (ZF), old bits in rax, new in rdx, the increment a constant of the loop (and every site of its shape) */
int noop_p3_s4(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(12 + site);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */
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
	/* metric = m.desc.fq_name: rcx +24: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->cx;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rcx -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rcx -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rcx -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v3, 0, sizeof(e->v3));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&e->v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rcx -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v4, 0, sizeof(e->v4));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&e->v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rcx -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v5, 0, sizeof(e->v5));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&e->v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rcx -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v6, 0, sizeof(e->v6));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&e->v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rcx -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v7, 0, sizeof(e->v7));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&e->v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rcx -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v8, 0, sizeof(e->v8));
	do {
		u64 a = 0;
		a = ctx->cx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&e->v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rcx +16 */
	e->v9 = 0;
	e->v9 = ctx->cx + (16);
	/* delta = the increment: the constant 0x… (in the code) */
	e->v10 = 0;
	do {
		u64 k = 0xbff0000000000000ULL;
		_Static_assert(sizeof(e->v10) == 8, "an 8-byte constant");
		__builtin_memcpy(&e->v10, &k, 8);
	} while (0);
	/* value = the value after the update: rdx */
	e->v11 = 0;
	e->v11 = ctx->dx;
	/* before = the value before the update: rax */
	e->v12 = 0;
	e->v12 = ctx->ax;
	/* now = the field just after the update: rcx +152: 8 bytes */
	e->v13 = 0;
	do {
		u64 a = 0;
		a = ctx->cx;
		if (noop_read(&e->v13, 8, a + (152))) { faults |= 0x2000; break; }
	} while (0);
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
	NOOP_BYTES(128) v0;         /* metric: m.desc.fq_name */
	NOOP_BYTES(32) v1;          /* l0_name: m.label_pairs[0].name */
	NOOP_BYTES(64) v2;          /* l0_value: m.label_pairs[0].value */
	NOOP_BYTES(32) v3;          /* l1_name: m.label_pairs[1].name */
	NOOP_BYTES(64) v4;          /* l1_value: m.label_pairs[1].value */
	NOOP_BYTES(32) v5;          /* l2_name: m.label_pairs[2].name */
	NOOP_BYTES(64) v6;          /* l2_value: m.label_pairs[2].value */
	NOOP_BYTES(32) v7;          /* l3_name: m.label_pairs[3].name */
	NOOP_BYTES(64) v8;          /* l3_value: m.label_pairs[3].value */
	u64 v9;                     /* object: m */
	u64 v10;                    /* before: the value before the update */
	u64 v11[2];                 /* observed: v */
};
_Static_assert(sizeof(struct noop_ev_4) == 656, "event layout");
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

struct noop_call_4 {
	u64 ts;  /* bpf_ktime_get_ns() at the entry */
	u64 root[1];  /* pointers kept for the return */
	struct noop_ev_4 e;  /* the values read at the entry */
};
BPF_TABLE("lru_hash", struct noop_callkey, struct noop_call_4, noop_calls_4, 4096);  /* calls in progress */
BPF_PERCPU_ARRAY(noop_callzero_4, struct noop_call_4, 1);  /* an empty record, never written */

/* probe histogram: prometheus::histogram::Histogram::observe at 0x…: after the lock xadd on the histogram's count at 0x…: the count before it in rax; kept for the sum's swap at 0x… */
int noop_p4_s0(struct pt_regs *ctx)
{
	noop_trap(17);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	struct noop_callkey key = {};
	key.a = bpf_get_current_pid_tgid();
	key.b = ctx->sp;
	struct noop_call_4 *c = noop_calls_4.lookup(&key);
	if (!c) {
		int zero = 0;
		struct noop_call_4 *empty = noop_callzero_4.lookup(&zero);
		if (!empty)
			return 0;
		noop_calls_4.update(&key, empty);
		c = noop_calls_4.lookup(&key);
		if (!c)
			return 0;
	}
	u32 faults = 0, absent = 0;
	c->ts = bpf_ktime_get_ns();
	/* metric = m.desc.fq_name: rdx +24: {ptr,len} header, then the bytes */
	__builtin_memset(&c->e.v0, 0, sizeof(c->e.v0));
	do {
		u64 a = 0;
		a = ctx->dx;
		u64 h[2];
		if (noop_read(h, 16, a + (24))) { faults |= 0x1; break; }
		if (noop_copy(&c->e.v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* l0_name = m.label_pairs[0].name: rdx -> [0] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&c->e.v1, 0, sizeof(c->e.v1));
	do {
		u64 a = 0;
		a = ctx->dx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x2; break; }
			if (s[1] <= 0) { absent |= 0x2; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&c->e.v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* l0_value = m.label_pairs[0].value: rdx -> [0] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&c->e.v2, 0, sizeof(c->e.v2));
	do {
		u64 a = 0;
		a = ctx->dx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x4; break; }
		if (noop_copy(&c->e.v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* l1_name = m.label_pairs[1].name: rdx -> [1] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&c->e.v3, 0, sizeof(c->e.v3));
	do {
		u64 a = 0;
		a = ctx->dx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x8; break; }
			if (s[1] <= 1) { absent |= 0x8; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x8; break; }
		if (noop_copy(&c->e.v3, h[0], h[1])) { faults |= 0x8; break; }
	} while (0);
	/* l1_value = m.label_pairs[1].value: rdx -> [1] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&c->e.v4, 0, sizeof(c->e.v4));
	do {
		u64 a = 0;
		a = ctx->dx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x10; break; }
			if (s[1] <= 1) { absent |= 0x10; break; }
			a = s[0] + 48;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x10; break; }
		if (noop_copy(&c->e.v4, h[0], h[1])) { faults |= 0x10; break; }
	} while (0);
	/* l2_name = m.label_pairs[2].name: rdx -> [2] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&c->e.v5, 0, sizeof(c->e.v5));
	do {
		u64 a = 0;
		a = ctx->dx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x20; break; }
			if (s[1] <= 2) { absent |= 0x20; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x20; break; }
		if (noop_copy(&c->e.v5, h[0], h[1])) { faults |= 0x20; break; }
	} while (0);
	/* l2_value = m.label_pairs[2].value: rdx -> [2] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&c->e.v6, 0, sizeof(c->e.v6));
	do {
		u64 a = 0;
		a = ctx->dx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x40; break; }
			if (s[1] <= 2) { absent |= 0x40; break; }
			a = s[0] + 96;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x40; break; }
		if (noop_copy(&c->e.v6, h[0], h[1])) { faults |= 0x40; break; }
	} while (0);
	/* l3_name = m.label_pairs[3].name: rdx -> [3] of slice at +136 (elem 48) +8: {ptr,len} header, then the bytes */
	__builtin_memset(&c->e.v7, 0, sizeof(c->e.v7));
	do {
		u64 a = 0;
		a = ctx->dx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x80; break; }
			if (s[1] <= 3) { absent |= 0x80; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x80; break; }
		if (noop_copy(&c->e.v7, h[0], h[1])) { faults |= 0x80; break; }
	} while (0);
	/* l3_value = m.label_pairs[3].value: rdx -> [3] of slice at +136 (elem 48) +32: {ptr,len} header, then the bytes */
	__builtin_memset(&c->e.v8, 0, sizeof(c->e.v8));
	do {
		u64 a = 0;
		a = ctx->dx;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (136))) { faults |= 0x100; break; }
			if (s[1] <= 3) { absent |= 0x100; break; }
			a = s[0] + 144;
		}
		u64 h[2];
		if (noop_read(h, 16, a + (32))) { faults |= 0x100; break; }
		if (noop_copy(&c->e.v8, h[0], h[1])) { faults |= 0x100; break; }
	} while (0);
	/* object = m: rdx +16 */
	c->e.v9 = 0;
	c->e.v9 = ctx->dx + (16);
	/* before = the value before the update: rax */
	c->e.v10 = 0;
	c->e.v10 = ctx->ax;
	/* observed = v: read at the return */
	__builtin_memset(&c->e.v11, 0, sizeof(c->e.v11));
	c->e.hdr.faults = faults;
	c->e.hdr.absent = absent;
	return 0;
}

/* probe histogram: prometheus::histogram::Histogram::observe at 0x…: after the lock cmpxchg on the histogram's sum at 0x…: a successful swap (ZF), the observed value new - old (rax, rdx), the count as the call's count site read it */
int noop_p4_s1(struct pt_regs *ctx)
{
	noop_trap(18);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	struct noop_callkey key = {};
	key.a = bpf_get_current_pid_tgid();
	key.b = ctx->sp;
	struct noop_call_4 *c = noop_calls_4.lookup(&key);
	if (!c) {  /* its entry was not seen (noop attached during the call) */
		int probe = 4;
		u64 *n = noop_unpaired.lookup(&probe);
		if (n)
			(*n)++;
		return 0;
	}
	{
		if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */
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
			goto done;
		}
		noop_header(&e->hdr, 4, 1);
		u32 faults = c->e.hdr.faults, absent = c->e.hdr.absent;
		/* metric = m.desc.fq_name: as read at the call's entry */
		__builtin_memset(&e->v0, 0, sizeof(e->v0));
		_Static_assert(sizeof(e->v0) == sizeof(c->e.v0), "saved value");
		__builtin_memcpy(&e->v0, &c->e.v0, sizeof(e->v0));
		/* l0_name = m.label_pairs[0].name: as read at the call's entry */
		__builtin_memset(&e->v1, 0, sizeof(e->v1));
		_Static_assert(sizeof(e->v1) == sizeof(c->e.v1), "saved value");
		__builtin_memcpy(&e->v1, &c->e.v1, sizeof(e->v1));
		/* l0_value = m.label_pairs[0].value: as read at the call's entry */
		__builtin_memset(&e->v2, 0, sizeof(e->v2));
		_Static_assert(sizeof(e->v2) == sizeof(c->e.v2), "saved value");
		__builtin_memcpy(&e->v2, &c->e.v2, sizeof(e->v2));
		/* l1_name = m.label_pairs[1].name: as read at the call's entry */
		__builtin_memset(&e->v3, 0, sizeof(e->v3));
		_Static_assert(sizeof(e->v3) == sizeof(c->e.v3), "saved value");
		__builtin_memcpy(&e->v3, &c->e.v3, sizeof(e->v3));
		/* l1_value = m.label_pairs[1].value: as read at the call's entry */
		__builtin_memset(&e->v4, 0, sizeof(e->v4));
		_Static_assert(sizeof(e->v4) == sizeof(c->e.v4), "saved value");
		__builtin_memcpy(&e->v4, &c->e.v4, sizeof(e->v4));
		/* l2_name = m.label_pairs[2].name: as read at the call's entry */
		__builtin_memset(&e->v5, 0, sizeof(e->v5));
		_Static_assert(sizeof(e->v5) == sizeof(c->e.v5), "saved value");
		__builtin_memcpy(&e->v5, &c->e.v5, sizeof(e->v5));
		/* l2_value = m.label_pairs[2].value: as read at the call's entry */
		__builtin_memset(&e->v6, 0, sizeof(e->v6));
		_Static_assert(sizeof(e->v6) == sizeof(c->e.v6), "saved value");
		__builtin_memcpy(&e->v6, &c->e.v6, sizeof(e->v6));
		/* l3_name = m.label_pairs[3].name: as read at the call's entry */
		__builtin_memset(&e->v7, 0, sizeof(e->v7));
		_Static_assert(sizeof(e->v7) == sizeof(c->e.v7), "saved value");
		__builtin_memcpy(&e->v7, &c->e.v7, sizeof(e->v7));
		/* l3_value = m.label_pairs[3].value: as read at the call's entry */
		__builtin_memset(&e->v8, 0, sizeof(e->v8));
		_Static_assert(sizeof(e->v8) == sizeof(c->e.v8), "saved value");
		__builtin_memcpy(&e->v8, &c->e.v8, sizeof(e->v8));
		/* object = m: as read at the call's entry */
		e->v9 = 0;
		_Static_assert(sizeof(e->v9) == sizeof(c->e.v9), "saved value");
		__builtin_memcpy(&e->v9, &c->e.v9, sizeof(e->v9));
		/* before = the value before the update: as read at the call's entry */
		e->v10 = 0;
		_Static_assert(sizeof(e->v10) == sizeof(c->e.v10), "saved value");
		__builtin_memcpy(&e->v10, &c->e.v10, sizeof(e->v10));
		/* observed = v: rdx - rax as float64s (new value - old value) */
		__builtin_memset(&e->v11, 0, sizeof(e->v11));
		e->v11[0] = ctx->ax;
		e->v11[1] = ctx->dx;
		e->hdr.faults = faults;
		e->hdr.absent = absent;
		if (*(volatile u32 *)&e->hdr.faults) {
			int probe = 4;
			u64 *n = noop_faults.lookup(&probe);
			if (n)
				(*n)++;
		}
		noop_events.ringbuf_submit(e, 0);
		goto done;
	}
	done:
	noop_calls_4.delete(&key);
	return 0;
}

