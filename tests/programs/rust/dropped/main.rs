//! A test target for values a release build no longer passes.
//!
//! Built with optimisations and debug info. LLVM compiles `audit` to add two
//! lengths it is handed in place of `e` (neither `e` nor `unused` is passed) and
//! `post` to take `e.amount_cents` in place of `e`, dropping `batch`; both are
//! marked DW_CC_nocall. `exported` keeps the C convention but never reads `b`,
//! so its caller leaves that register as it was. `score` is called through a
//! function pointer, so it keeps rustc's convention.
//!
//! `dropped N` makes N rounds of calls and prints, for each round, one JSON line
//! with every value it passed.

#![allow(unused_variables)]

use std::hint::black_box;

pub struct Entry {
    pub account: String,
    pub memo: &'static str,
    pub amount_cents: i64,
    pub tags: Vec<u16>,
}

#[inline(never)]
pub fn audit(e: &Entry, unused: u64) -> usize {
    e.account.len() + e.tags.len()
}

#[inline(never)]
pub fn post(total: &mut i64, e: &Entry, batch: u32) -> i64 {
    *total += e.amount_cents;
    *total
}

#[inline(never)]
#[no_mangle]
pub extern "C" fn exported(a: u64, b: u64) -> u64 {
    a.wrapping_mul(3)
}

#[inline(never)]
pub fn score(e: &Entry, weight: u64) -> u64 {
    e.amount_cents as u64 * weight + e.memo.len() as u64
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    let scorer: fn(&Entry, u64) -> u64 = black_box(score);
    let mut total = 0i64;
    let mut sum = 0u64;
    for i in 0..n {
        let e = Entry {
            account: format!("acct-{i}"),
            memo: "memo",
            amount_cents: 100 + i as i64,
            tags: vec![1, 2, i as u16],
        };
        let before = total;
        sum += audit(black_box(&e), i * 7) as u64;
        sum += post(&mut total, black_box(&e), i as u32) as u64;
        sum += exported(black_box(i + 9), i * 5);
        sum += scorer(&e, i + 2);
        println!(
            "{{\"amount\": {}, \"unused\": {}, \"total_before\": {}, \"batch\": {}, \
             \"exported_a\": {}, \"weight\": {}}}",
            e.amount_cents, i * 7, before, i, i + 9, i + 2
        );
    }
    println!("{{\"sum\": {sum}}}");
}
