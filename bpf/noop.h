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
