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
BPF_PERCPU_ARRAY(noop_produced, u64, 4);  /* per probe: records made */
BPF_PERCPU_ARRAY(noop_lost, u64, 4);  /* per probe: records the ring buffer refused */
BPF_PERCPU_ARRAY(noop_faults, u64, 4);  /* per probe: user-memory read faults */
BPF_PERCPU_ARRAY(noop_unpaired, u64, 4);  /* per exit probe: returns without their call's entry */
BPF_PERCPU_ARRAY(noop_cancelled, u64, 4);  /* per exit probe on an async fn: futures dropped before they completed */

struct noop_trapkey {
	u32 site;
	u32 pid;
};
BPF_PERCPU_HASH(noop_traps, struct noop_trapkey, u64, 136);  /* hits per site and process */
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
	u64 v0;                     /* id: o.ID */
	NOOP_BYTES(64) v1;          /* customer: o.Customer */
	NOOP_BYTES(64) v2;          /* first_sku: o.Items[0].SKU */
	u64 v3;                     /* first_qty: o.Items[0].Qty */
	u64 v4;                     /* lines: len(o.Items) */
	u64 v5;                     /* goroutine: $goid */
};
_Static_assert(sizeof(struct noop_ev_0) == 216, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v1) == 48, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v2) == 120, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v3) == 192, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v4) == 200, "event layout");
_Static_assert(offsetof(struct noop_ev_0, v5) == 208, "event layout");

/* probe order: main.placeOrder at 0x…: entry: the first instruction (mov, single-stepped); no stack check, so each call passes it once */
int noop_p0_s0(struct pt_regs *ctx)
{
	noop_trap(0);
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
	noop_header(&e->hdr, 0, 0);
	u32 faults = 0, absent = 0;
	noop_read(&e->hdr.goid, 8, ctx->r14 + 152);  /* g (r14) -> goid */
	/* id = o.ID: rax +0: 8 bytes */
	e->v0 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v0, 8, a)) { faults |= 0x1; break; }
	} while (0);
	/* customer = o.Customer: rax +8: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v1, 0, sizeof(e->v1));
	do {
		u64 a = 0;
		a = ctx->ax;
		u64 h[2];
		if (noop_read(h, 16, a + (8))) { faults |= 0x2; break; }
		if (noop_copy(&e->v1, h[0], h[1])) { faults |= 0x2; break; }
	} while (0);
	/* first_sku = o.Items[0].SKU: rax -> [0] of slice at +24 (elem 24) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (24))) { faults |= 0x4; break; }
			if (s[1] <= 0) { absent |= 0x4; break; }
			a = s[0] + 0;
		}
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x4; break; }
		if (noop_copy(&e->v2, h[0], h[1])) { faults |= 0x4; break; }
	} while (0);
	/* first_qty = o.Items[0].Qty: rax -> [0] of slice at +24 (elem 24) +16: 8 bytes */
	e->v3 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		{
			u64 s[2];  /* slice header: ptr, len */
			if (noop_read(s, 16, a + (24))) { faults |= 0x8; break; }
			if (s[1] <= 0) { absent |= 0x8; break; }
			a = s[0] + 0;
		}
		if (noop_read(&e->v3, 8, a + (16))) { faults |= 0x8; break; }
	} while (0);
	/* lines = len(o.Items): rax +32: 8 bytes */
	e->v4 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v4, 8, a + (32))) { faults |= 0x10; break; }
	} while (0);
	/* goroutine = $goid: $goid */
	e->v5 = 0;
	e->v5 = e->hdr.goid;
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
	NOOP_BYTES(64) v0;          /* customer: o.Customer */
	u64 v1;                     /* items: ~r0 */
	u64 v2;                     /* took: $duration */
};
_Static_assert(sizeof(struct noop_ev_1) == 128, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v1) == 112, "event layout");
_Static_assert(offsetof(struct noop_ev_1, v2) == 120, "event layout");

struct noop_call_1 {
	u64 ts;  /* bpf_ktime_get_ns() at the entry */
	u64 root[1];  /* pointers kept for the return */
	struct noop_ev_1 e;  /* the values read at the entry */
};
BPF_TABLE("lru_hash", struct noop_callkey, struct noop_call_1, noop_calls_1, 65536);  /* calls in progress */
BPF_PERCPU_ARRAY(noop_callzero_1, struct noop_call_1, 1);  /* an empty record, never written */

/* probe order_done: main.placeOrder at 0x…: the call's entry, kept for its returns: entry: the first instruction (mov, single-stepped); no stack check, so each call passes it once */
int noop_p1_s0(struct pt_regs *ctx)
{
	noop_trap(1);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	struct noop_callkey key = {};
	u64 hi = 0;
	noop_probe_read_user(&hi, 8, (const void *)(ctx->r14 + 8));  /* g.stack.hi */
	key.a = ctx->r14;
	key.b = hi - ctx->sp;
	struct noop_call_1 *c = noop_calls_1.lookup(&key);
	if (!c) {
		int zero = 0;
		struct noop_call_1 *empty = noop_callzero_1.lookup(&zero);
		if (!empty)
			return 0;
		noop_calls_1.update(&key, empty);
		c = noop_calls_1.lookup(&key);
		if (!c)
			return 0;
	}
	u32 faults = 0, absent = 0;
	c->ts = bpf_ktime_get_ns();
	/* customer = o.Customer: rax: kept as pointer 0 */
	c->root[0] = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		c->root[0] = a;
	} while (0);
	/* items = ~r0: read at the return */
	c->e.v1 = 0;
	/* took = $duration: read at the return */
	c->e.v2 = 0;
	c->e.hdr.faults = faults;
	c->e.hdr.absent = absent;
	return 0;
}

/* probe order_done: main.placeOrder at 0x…: exit: ret at +0x15 (single-stepped) */
int noop_p1_s1(struct pt_regs *ctx)
{
	noop_trap(2);
	if (noop_left_out(0))  /* --pid: another process */
		return 0;
	struct noop_callkey key = {};
	u64 hi = 0;
	noop_probe_read_user(&hi, 8, (const void *)(ctx->r14 + 8));  /* g.stack.hi */
	key.a = ctx->r14;
	key.b = hi - ctx->sp;
	struct noop_call_1 *c = noop_calls_1.lookup(&key);
	if (!c) {  /* its entry was not seen (noop attached during the call) */
		int probe = 1;
		u64 *n = noop_unpaired.lookup(&probe);
		if (n)
			(*n)++;
		return 0;
	}
	{
		int probe_1 = 1;
		u64 *made = noop_produced.lookup(&probe_1);
		if (made)
			(*made)++;
		struct noop_ev_1 *e = noop_events.ringbuf_reserve(sizeof(*e));
		if (!e) {
			u64 *lost = noop_lost.lookup(&probe_1);
			if (lost)
				(*lost)++;
			goto done;
		}
		noop_header(&e->hdr, 1, 1);
		u32 faults = c->e.hdr.faults, absent = c->e.hdr.absent;
		/* customer = o.Customer: pointer 0 saved at entry +8: {ptr,len} header, then the bytes */
		__builtin_memset(&e->v0, 0, sizeof(e->v0));
		do {
			u64 a = 0;
			a = c->root[0];
			u64 h[2];
			if (noop_read(h, 16, a + (8))) { faults |= 0x1; break; }
			if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
		} while (0);
		/* items = ~r0: rax */
		e->v1 = 0;
		e->v1 = ctx->ax;
		/* took = $duration: $duration */
		e->v2 = 0;
		e->v2 = (bpf_ktime_get_ns() - c->ts);
		e->hdr.faults = faults;
		e->hdr.absent = absent;
		if (*(volatile u32 *)&e->hdr.faults) {
			int probe = 1;
			u64 *n = noop_faults.lookup(&probe);
			if (n)
				(*n)++;
		}
		noop_events.ringbuf_submit(e, 0);
		goto done;
	}
	done:
	noop_calls_1.delete(&key);
	return 0;
}

struct noop_ev_2 {
	struct noop_hdr hdr;
	NOOP_BYTES(64) v0;          /* metric: c.desc.fqName */
	u64 v1;                     /* ints_before: c.valInt */
};
_Static_assert(sizeof(struct noop_ev_2) == 120, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_2, v1) == 112, "event layout");

/* probe counter_inc: github.com/prometheus/client_golang/prometheus.(*counter).Inc at 0x…: entry: the first instruction (mov, single-stepped); no stack check, so each call passes it once */
int noop_p2_s0(struct pt_regs *ctx)
{
	noop_trap(3);
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
	noop_header(&e->hdr, 2, 0);
	u32 faults = 0, absent = 0;
	/* metric = c.desc.fqName: rax -> *(+32) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&a, 8, a + (32))) { faults |= 0x1; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* ints_before = c.valInt: rax +8: 8 bytes */
	e->v1 = 0;
	do {
		u64 a = 0;
		a = ctx->ax;
		if (noop_read(&e->v1, 8, a + (8))) { faults |= 0x2; break; }
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
	NOOP_BYTES(64) v0;          /* metric: g.desc.fqName */
	u64 v1;                     /* now: g.valBits */
	u64 v2[2];                  /* delta: val */
};
_Static_assert(sizeof(struct noop_ev_3) == 136, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v0) == 40, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v1) == 112, "event layout");
_Static_assert(offsetof(struct noop_ev_3, v2) == 120, "event layout");

/* probe gauge_add: github.com/prometheus/client_golang/prometheus.(*gauge).Add at 0x…: the float argument never leaves its XMM register, which a uprobe cannot read: after the lock cmpxchg on gauge.valBits: a successful update (at the je after its sete and test: ZF clear) at +0x26 of github.com/prometheus/client_golang/prometheus.(*gauge).Add (je, emulated); the argument is rdx - rax as float64s (new value - old value) (and every site of its shape) */
int noop_p3_s0(struct pt_regs *ctx)
{
	u16 site = noop_attach_cookie(ctx);  /* this site's index */
	noop_trap(4 + site);
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
	/* metric = g.desc.fqName: rbx -> *(+24) +0: {ptr,len} header, then the bytes */
	__builtin_memset(&e->v0, 0, sizeof(e->v0));
	do {
		u64 a = 0;
		a = ctx->bx;
		if (noop_read(&a, 8, a + (24))) { faults |= 0x1; break; }
		u64 h[2];
		if (noop_read(h, 16, a)) { faults |= 0x1; break; }
		if (noop_copy(&e->v0, h[0], h[1])) { faults |= 0x1; break; }
	} while (0);
	/* now = g.valBits: rbx +0: 8 bytes */
	e->v1 = 0;
	do {
		u64 a = 0;
		a = ctx->bx;
		if (noop_read(&e->v1, 8, a)) { faults |= 0x2; break; }
	} while (0);
	/* delta = val: rdx - rax as float64s (new value - old value) */
	__builtin_memset(&e->v2, 0, sizeof(e->v2));
	e->v2[0] = ctx->ax;
	e->v2[1] = ctx->dx;
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

