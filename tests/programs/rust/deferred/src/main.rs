//! deferred makes the prometheus crate's updates that happen later than the call that
//! asks for them: a histogram timer's observation when it stops or is dropped, and a
//! local metric's (`counter.local()`, `histogram.local()`) when it is flushed. Each tick
//! n makes these calls:
//!
//! - `ops_timer_observe_duration`: `start_timer()`, then `observe_duration()`
//! - `ops_timer_stop_and_record`: `start_timer()`, then `stop_and_record()`
//! - `ops_timer_stop_and_discard`: `start_timer()`, then `stop_and_discard()` (records
//!   nothing)
//! - `ops_timer_dropped`: `start_timer()`, dropped at the end of a scope (records)
//! - `ops_closure_duration`: `observe_closure_duration(..)`
//! - `ops_local_int_counter` (a kept `LocalIntCounter`): k = n % 3 times `inc()`, then
//!   `inc_by(k)`, then `flush()` (the crate skips a flush of 0)
//! - `ops_local_counter` (a kept `LocalCounter`): on odd ticks `inc_by(0.25)` and
//!   `inc()`; `flush()` every tick
//! - `ops_local_int_counter_dropped`: a new `LocalIntCounter`, `inc_by(3)`, dropped
//!   unflushed (the crate's local counters do not flush on drop)
//! - `ops_local_histogram` (a kept `LocalHistogram`): n % 4 observations (0.25, 0.5,
//!   0.75), then `flush()`
//! - `ops_local_histogram_dropped`: a new `LocalHistogram`, `observe(0.5)` and
//!   `observe(1.5)`, dropped (its drop flushes)
//! - `ops_local_counter_vec{op="flush"}` (a kept `LocalIntCounterVec`): `inc_by(2)`;
//!   `flush()` on even ticks
//! - `ops_local_histogram_vec{op="flush"}` (a kept `LocalHistogramVec`): `observe(0.75)`;
//!   `flush()` when n % 3 == 0
//!
//! Each flush prints what it hands the shared metric (before the tick's line), and the
//! last tick the count of each call, for the tests to compare with what noop saw:
//!
//!     deferred: flush ops_local_histogram 3 1.5       (observations, their sum)
//!     deferred: flush ops_local_int_counter 4.0       (a counter: its local sum)
//!     deferred: calls ops_timer_dropped:drop=23 ...
//!
//! Flags (as the examples'): `-listen ADDR`, `-period DURATION` (`30ms`), `-ticks N`,
//! `-linger DURATION`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use prometheus::local::{LocalCounter, LocalHistogram, LocalHistogramVec, LocalIntCounter,
                        LocalIntCounterVec};
use prometheus::{
    Counter, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts,
    Registry, TextEncoder,
};

const BUCKETS: [f64; 3] = [0.5, 1.0, 2.0];

struct Metrics {
    timer_observe: Histogram,
    timer_record: Histogram,
    timer_discard: Histogram,
    timer_dropped: Histogram,
    closure: Histogram,
    local_int: LocalIntCounter,
    local_float: LocalCounter,
    int_dropped: IntCounter,
    local_hist: LocalHistogram,
    hist_dropped: Histogram,
    local_counter_vec: LocalIntCounterVec,
    local_hist_vec: LocalHistogramVec,
    calls: BTreeMap<&'static str, u64>,
}

fn histogram(reg: &Registry, name: &str, help: &str) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(BUCKETS.to_vec()))
        .unwrap();
    reg.register(Box::new(h.clone())).unwrap();
    h
}

impl Metrics {
    fn new(reg: &Registry) -> Metrics {
        let int = IntCounter::new("ops_local_int_counter", "Flushed from a local.").unwrap();
        let float = Counter::new("ops_local_counter", "Flushed from a local.").unwrap();
        let int_dropped = IntCounter::new("ops_local_int_counter_dropped",
                                          "Its locals are dropped unflushed.").unwrap();
        let counter_vec = IntCounterVec::new(
            Opts::new("ops_local_counter_vec", "Flushed from a local vec."), &["op"]).unwrap();
        let hist_vec = HistogramVec::new(
            HistogramOpts::new("ops_local_histogram_vec", "Flushed from a local vec.")
                .buckets(BUCKETS.to_vec()), &["op"]).unwrap();
        for c in [Box::new(int.clone()) as Box<dyn prometheus::core::Collector>,
                  Box::new(float.clone()), Box::new(int_dropped.clone()),
                  Box::new(counter_vec.clone()), Box::new(hist_vec.clone())] {
            reg.register(c).unwrap();
        }
        Metrics {
            timer_observe: histogram(reg, "ops_timer_observe_duration", "observe_duration()."),
            timer_record: histogram(reg, "ops_timer_stop_and_record", "stop_and_record()."),
            timer_discard: histogram(reg, "ops_timer_stop_and_discard", "stop_and_discard()."),
            timer_dropped: histogram(reg, "ops_timer_dropped", "A timer dropped."),
            closure: histogram(reg, "ops_closure_duration", "observe_closure_duration()."),
            local_int: int.local(),
            local_float: float.local(),
            int_dropped,
            local_hist: histogram(reg, "ops_local_histogram", "Flushed from a local.").local(),
            hist_dropped: histogram(reg, "ops_local_histogram_dropped",
                                    "Flushed by its local's drop."),
            local_counter_vec: counter_vec.local(),
            local_hist_vec: hist_vec.local(),
            calls: BTreeMap::new(),
        }
    }

    fn made(&mut self, what: &'static str) {
        *self.calls.entry(what).or_default() += 1;
    }

    #[inline(never)]
    fn timers(&mut self, n: u64) {
        self.timer_observe.start_timer().observe_duration();
        black_box(self.timer_record.start_timer().stop_and_record());
        black_box(self.timer_discard.start_timer().stop_and_discard());
        {
            let _timer = self.timer_dropped.start_timer();
            step(n);
        }
        self.closure.observe_closure_duration(|| step(n));
        for what in ["ops_timer_observe_duration:observe_duration",
                     "ops_timer_stop_and_record:stop_and_record",
                     "ops_timer_stop_and_discard:stop_and_discard",
                     "ops_timer_dropped:drop", "ops_closure_duration:observe_closure_duration"] {
            self.made(what);
        }
    }

    #[inline(never)]
    fn counters(&mut self, n: u64) {
        let k = step(n) % 3;
        for _ in 0..k {
            self.local_int.inc();
        }
        self.local_int.inc_by(k);
        flushed("ops_local_int_counter", self.local_int.get() as f64);
        self.local_int.flush();
        if step(n) % 2 == 1 {
            self.local_float.inc_by(0.25);
            self.local_float.inc();
        }
        flushed("ops_local_counter", self.local_float.get());
        self.local_float.flush();
        {
            let dropped = self.int_dropped.local();
            dropped.inc_by(3);
        }
        let child = self.local_counter_vec.with_label_values(&["flush"]);
        child.inc_by(2);
        if step(n) % 2 == 0 {
            flushed("ops_local_counter_vec{op=\"flush\"}", child.get() as f64);
            self.local_counter_vec.flush();
            self.made("ops_local_counter_vec:flush");
        }
        for what in ["ops_local_int_counter:flush", "ops_local_counter:flush",
                     "ops_local_int_counter_dropped:drop"] {
            self.made(what);
        }
    }

    #[inline(never)]
    fn histograms(&mut self, n: u64) {
        let k = step(n) % 4;
        for j in 0..k {
            self.local_hist.observe(0.25 * (j + 1) as f64);
        }
        flushed_observations("ops_local_histogram", self.local_hist.get_sample_count(),
                             self.local_hist.get_sample_sum());
        self.local_hist.flush();
        {
            let dropped = self.hist_dropped.local();
            dropped.observe(0.5);
            dropped.observe(1.5);
            flushed_observations("ops_local_histogram_dropped", dropped.get_sample_count(),
                                 dropped.get_sample_sum());
        }
        let child = self.local_hist_vec.with_label_values(&["flush"]);
        child.observe(0.75);
        if step(n) % 3 == 0 {
            flushed_observations("ops_local_histogram_vec{op=\"flush\"}",
                                 child.get_sample_count(), child.get_sample_sum());
            self.local_hist_vec.flush();
            self.made("ops_local_histogram_vec:flush");
        }
        self.made("ops_local_histogram:flush");
        self.made("ops_local_histogram_dropped:drop");
    }
}

/// What a flush hands the shared counter: its local sum.
fn flushed(series: &str, sum: f64) {
    eprintln!("deferred: flush {series} {sum:?}");
}

/// What a flush hands the shared histogram: its local observations and their sum.
fn flushed_observations(series: &str, count: u64, sum: f64) {
    eprintln!("deferred: flush {series} {count} {sum:?}");
}

/// Work between two updates that the compiler keeps a call (its argument back).
#[inline(never)]
fn step(n: u64) -> u64 {
    black_box(n)
}

fn duration(text: &str) -> Duration {
    let (number, unit) = text.split_at(text.find(|c: char| c.is_alphabetic()).unwrap_or(text.len()));
    let value: f64 = number.parse().unwrap_or_else(|_| usage(&format!("not a duration: {text}")));
    match unit {
        "ms" => Duration::from_secs_f64(value / 1000.0),
        "s" | "" => Duration::from_secs_f64(value),
        _ => usage(&format!("unit {unit:?} (use ms or s)")),
    }
}

fn usage(why: &str) -> ! {
    eprintln!("deferred: {why}");
    eprintln!("usage: deferred [-listen ADDR] [-period D] [-ticks N] [-linger D]");
    std::process::exit(2)
}

fn serve(listener: TcpListener, reg: Registry) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut request = [0u8; 1024];
        let n = stream.read(&mut request).unwrap_or(0);
        let mut body = Vec::new();
        if request[..n].starts_with(b"GET /metrics") {
            TextEncoder::new().encode(&reg.gather(), &mut body).unwrap();
        }
        let head = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                            Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
    }
}

fn main() {
    let (mut listen, mut period, mut ticks, mut linger) =
        ("127.0.0.1:0".to_string(), Duration::from_millis(30), 23u64, Duration::ZERO);
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).unwrap_or_else(|| usage(&format!("{} needs a value", pair[0])));
        match pair[0].trim_start_matches('-') {
            "listen" => listen = value.clone(),
            "period" => period = duration(value),
            "ticks" => ticks = value.parse().unwrap_or_else(|_| usage("-ticks: not a number")),
            "linger" => linger = duration(value),
            other => usage(&format!("unknown flag -{other}")),
        }
    }
    let reg = Registry::new();
    let mut metrics = Metrics::new(&reg);
    let listener = TcpListener::bind(&listen).unwrap_or_else(|e| usage(&format!("listen: {e}")));
    eprintln!("deferred: pid {} serving http://{}/metrics", std::process::id(),
              listener.local_addr().unwrap());
    let served = reg.clone();
    thread::spawn(move || serve(listener, served));
    for n in 1..=ticks {
        thread::sleep(period);
        metrics.timers(black_box(n));
        metrics.counters(black_box(n));
        metrics.histograms(black_box(n));
        if n == ticks {
            let made: Vec<String> =
                metrics.calls.iter().map(|(k, v)| format!("{k}={v}")).collect();
            eprintln!("deferred: calls {}", made.join(" "));
        }
        eprintln!("deferred: tick {n}");
    }
    thread::sleep(linger);
}
