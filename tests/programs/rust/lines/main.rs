//! The shapes a line probe meets, in Rust: a for loop, a condition with &&, a branch
//! taken for some items only, and a helper inlined into its caller. Each round prints,
//! per item, one JSON line with what it computed, so a test can compare what a probe
//! read with what the program had. Lines a test names carry a marker (at: NAME).
//! The rejected branch goes through black_box so that it stays a branch: a release
//! build would otherwise fold one of its two ways into the condition's code (a setge
//! and an add that the line table gives to the condition's line), which no probe on
//! the branch's own line can see.
//!
//! `lines ROUNDS [PAUSE_MS] [LIMIT]`: ROUNDS 0 runs until killed.

use std::io::Write;

pub struct Order {
    pub id: i64,
    pub qty: i64,
    pub price: i64,
}

#[inline(always)]
fn clamp(v: i64, lo: i64, hi: i64) -> i64 {
    if v < lo { // at: clamp-low
        return lo;
    }
    if v > hi {
        return hi;
    }
    v
}

#[inline(never)]
pub fn process(round: i64, orders: &[Order], limit: i64) -> i64 {
    let mut total = 0;
    let mut rejected = 0;
    let mut out = std::io::stdout().lock();
    for o in orders { // at: for
        let cost = o.qty * o.price; // at: cost
        let clamped = clamp(cost, 0, limit); // at: clamp-call
        if o.qty > 0 && cost < limit { // at: and
            total += clamped; // at: accepted
        } else {
            rejected += std::hint::black_box(1); // at: rejected
        }
        let accepted = o.qty > 0 && cost < limit;
        let _ = writeln!(out, "{{\"round\":{},\"id\":{},\"cost\":{},\"clamped\":{},\"accepted\":{}}}",
                         round, o.id, cost, clamped, accepted);
    }
    total + rejected // at: return
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: i64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (rounds, pause, limit) = (arg(1, 1), arg(2, 0), arg(3, 60));
    let mut r = 0;
    while rounds == 0 || r < rounds {
        let n = 3 + r % 3;
        let orders: Vec<Order> = (0..n)
            .map(|i| Order { id: r * 10 + i, qty: (r + i) % 4, price: 7 + i * 13 })
            .collect();
        let total = process(r, std::hint::black_box(&orders), limit); // at: call-process
        eprintln!("round {} total {}", r, total);
        if pause > 0 {
            std::thread::sleep(std::time::Duration::from_millis(pause as u64));
        }
        r += 1;
    }
}
