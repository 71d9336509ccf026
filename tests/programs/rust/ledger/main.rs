//! A test target for Rust's everyday values, built at opt-level 3 with debug info.
//!
//! `Ledger::post` takes an `Entry` holding a `String`, a `&str`, a `Vec<u16>`, an
//! `Option<u64>` and an enum with unit, struct and tuple variants; the ledger holds
//! its configuration in an `Arc`, counts in atomics and a `Cell`, and returns the new
//! balance. `ledger N` makes N calls and prints, for each, one JSON line with every
//! value it passed and what it returned.

use std::cell::Cell;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub enum Kind {
    Credit,
    Debit { fee: u32, reason: &'static str },
    Transfer(u64, u16),
}

pub struct Entry {
    pub account: String,
    pub memo: &'static str,
    pub amount_cents: i64,
    pub kind: Kind,
    pub tags: Vec<u16>,
    pub reference: Option<u64>,
    pub parent: Option<Box<Entry>>,
    pub pair: (u32, String),
}

pub struct Config {
    pub limit: i64,
    pub name: String,
}

pub struct Meters(pub u64);

pub struct Ledger {
    pub cfg: Arc<Config>,
    pub shared: Rc<Config>,
    pub posted: AtomicU64,
    pub open: AtomicBool,
    pub balance: Cell<i64>,
    pub last: Mutex<u64>,
    pub distance: Meters,
    pub history: Vec<i64>,
}

impl Ledger {
    #[inline(never)]
    pub fn post(&mut self, e: &Entry, batch: u32) -> i64 {
        let fee = match &e.kind {
            Kind::Credit => 0,
            Kind::Debit { fee, .. } => *fee as i64,
            Kind::Transfer(_, hops) => *hops as i64,
        };
        let b = self.balance.get() + e.amount_cents - fee + batch as i64;
        self.balance.set(b);
        self.history.push(b);
        *self.last.lock().unwrap() = batch as u64;
        self.distance.0 += e.tags.len() as u64;
        self.posted.fetch_add(1, Ordering::Relaxed);
        b
    }

    #[inline(never)]
    pub fn post_done(&self, note: String) -> usize {
        black_box(&note);
        note.len() + self.posted.load(Ordering::Relaxed) as usize
    }
}

#[inline(never)]
pub fn classify(kind: &Kind) -> u32 {
    match kind {
        Kind::Credit => 1,
        Kind::Debit { fee, .. } => 2 + *fee * 10,
        Kind::Transfer(_, hops) => 3 + *hops as u32 * 10,
    }
}

#[inline(never)]
pub fn describe(e: &Entry) -> String {
    format!("{}:{}", e.account, e.amount_cents)
}

#[inline(never)]
pub fn settle(reference: Option<u64>, memo: &str, code: Option<u32>) -> u64 {
    reference.unwrap_or(7) + memo.len() as u64 + code.map_or(0, |c| c as u64 * 2)
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s)
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let cfg = Config { limit: 5000, name: "main-book".to_string() };
    let mut ledger = Ledger {
        cfg: Arc::new(cfg),
        shared: Rc::new(Config { limit: 77, name: "shared".to_string() }),
        posted: AtomicU64::new(0),
        open: AtomicBool::new(true),
        balance: Cell::new(0),
        last: Mutex::new(0),
        distance: Meters(0),
        history: Vec::new(),
    };
    let mut sum = 0u64;
    for i in 0..n {
        let kind = match i % 3 {
            0 => Kind::Credit,
            1 => Kind::Debit { fee: 10 + i as u32, reason: "overdraft" },
            _ => Kind::Transfer(1000 + i, (i % 7) as u16),
        };
        let tags: Vec<u16> = (0..(i % 4) as u16).map(|t| t * 10 + i as u16).collect();
        let parent = if i % 2 == 1 {
            Some(Box::new(Entry {
                account: format!("parent-{i}"),
                memo: "p",
                amount_cents: -(i as i64),
                kind: Kind::Credit,
                tags: Vec::new(),
                reference: None,
                parent: None,
                pair: (0, String::new()),
            }))
        } else {
            None
        };
        let e = Entry {
            account: format!("acct-{}", i * 11),
            memo: if i % 2 == 0 { "even" } else { "odd" },
            amount_cents: 100 * i as i64 - 250,
            kind,
            tags,
            reference: if i % 3 == 1 { None } else { Some(i * 1_000_003) },
            parent,
            pair: (i as u32 * 3, format!("p{i}")),
        };
        let posted_before = ledger.posted.load(Ordering::Relaxed);
        let distance_before = ledger.distance.0;
        let last_before = *ledger.last.lock().unwrap();
        let balance_before = ledger.balance.get();
        let history_len_before = ledger.history.len();
        let r = ledger.post(black_box(&e), i as u32);
        let c = classify(black_box(&e.kind));
        let d = describe(black_box(&e));
        let note = format!("note-{i}");
        let done = ledger.post_done(black_box(note.clone()));
        let code = if i % 2 == 0 { Some(i as u32 + 40) } else { None };
        let settled = settle(black_box(e.reference), black_box(e.memo), black_box(code));
        sum += settled;
        sum += r as u64 + c as u64 + d.len() as u64 + done as u64;
        let (kind, fee, reason, t0, t1) = match &e.kind {
            Kind::Credit => ("Credit", "null".into(), "null".into(), "null".into(), "null".into()),
            Kind::Debit { fee, reason } => ("Debit", fee.to_string(), quote(reason),
                                            "null".into(), "null".into()),
            Kind::Transfer(a, b) => ("Transfer", "null".into(), "null".into(), a.to_string(),
                                     b.to_string()),
        };
        let tags: Vec<String> = e.tags.iter().map(|t| t.to_string()).collect();
        let reference = e.reference.map_or("null".to_string(), |r| r.to_string());
        let parent = e.parent.as_ref().map_or("null".to_string(), |p| quote(&p.account));
        println!(
            "{{\"batch\": {i}, \"account\": {}, \"memo\": {}, \"amount\": {}, \"kind\": \"{kind}\", \
             \"fee\": {fee}, \"reason\": {reason}, \"t0\": {t0}, \"t1\": {t1}, \"tags\": [{}], \
             \"reference\": {reference}, \"parent\": {parent}, \"pair0\": {}, \"pair1\": {}, \
             \"limit\": {}, \"cfg_name\": {}, \"shared_limit\": {}, \"posted\": {posted_before}, \
             \"open\": {}, \"balance\": {balance_before}, \"last\": {last_before}, \
             \"distance\": {distance_before}, \"history_len\": {history_len_before}, \
             \"result\": {r}, \"class\": {c}, \"described\": {}, \"note\": {}, \"done\": {done}, \"code\": {}, \"settled\": {settled}}}",
            quote(&e.account), quote(e.memo), e.amount_cents, tags.join(", "), e.pair.0,
            quote(&e.pair.1), ledger.cfg.limit, quote(&ledger.cfg.name), ledger.shared.limit,
            ledger.open.load(Ordering::Relaxed), quote(&d), quote(&note),
            code.map_or("null".to_string(), |c| c.to_string())
        );
    }
    eprintln!("sum {sum}");
}
