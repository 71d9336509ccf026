//! branches updates prometheus crate metrics only when a condition holds, the way a
//! service counts its errors: `if failed { errors.inc() }`. In a release build the
//! update's LOCK instruction is then followed by the code where the path that skipped
//! it joins again. Each tick n makes these calls:
//!
//! - `branch_errors_total` (IntCounter): `inc()` when n % 3 == 0
//! - `branch_bytes_total` (IntCounter): `inc_by(n * 10)` when n % 4 != 1
//! - `branch_level` (IntGauge): `inc()` when n is even, else `dec()`
//! - `branch_float_level` (Gauge): `inc()` when n % 3 != 0, else `dec()`
//! - `branch_retries_total` (Counter): `inc()` when n % 7 < 4
//! - `branch_seconds` (Histogram): `observe(n / 4)` when n % 5 < 3
//!
//! and before its last tick's line it prints its own count of each call and the values
//! it observed, for the tests to compare with what noop saw:
//!
//!     branches: calls branch_errors_total:inc=7 branch_bytes_total:inc_by=17 ...
//!     branches: observed 0.25 0.5 0.75 1.5 ...
//!
//! Flags (as the examples'): `-listen ADDR`, `-period DURATION` (`30ms`), `-ticks N`,
//! `-linger DURATION`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use prometheus::{
    Counter, Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntGauge, Registry, TextEncoder,
};

struct Metrics {
    errors: IntCounter,
    bytes: IntCounter,
    level: IntGauge,
    float_level: Gauge,
    retries: Counter,
    seconds: Histogram,
}

/// The calls made, by "metric:method", and the values observed.
#[derive(Default)]
struct Calls {
    made: BTreeMap<&'static str, u64>,
    observed: Vec<f64>,
}

impl Calls {
    fn made(&mut self, what: &'static str) {
        *self.made.entry(what).or_default() += 1;
    }
}

impl Metrics {
    fn new(reg: &Registry) -> Metrics {
        let m = Metrics {
            errors: IntCounter::new("branch_errors_total", "inc() when the tick fails.")
                .unwrap(),
            bytes: IntCounter::new("branch_bytes_total", "inc_by(10 n) on most ticks.")
                .unwrap(),
            level: IntGauge::new("branch_level", "inc() on even ticks, else dec().").unwrap(),
            float_level: Gauge::new("branch_float_level", "inc() or dec() by the tick.")
                .unwrap(),
            retries: Counter::new("branch_retries_total", "inc() on some ticks.").unwrap(),
            seconds: Histogram::with_opts(
                HistogramOpts::new("branch_seconds", "observe(n / 4) on some ticks.")
                    .buckets(vec![1.0, 2.5, 5.0])).unwrap(),
        };
        reg.register(Box::new(m.errors.clone())).unwrap();
        reg.register(Box::new(m.bytes.clone())).unwrap();
        reg.register(Box::new(m.level.clone())).unwrap();
        reg.register(Box::new(m.float_level.clone())).unwrap();
        reg.register(Box::new(m.retries.clone())).unwrap();
        reg.register(Box::new(m.seconds.clone())).unwrap();
        m
    }

    /// The conditional updates, each followed by a call that both paths make (where
    /// the path that skipped the update joins the one that made it).
    #[inline(never)]
    fn tick(&self, n: u64) {
        if n % 3 == 0 {
            self.errors.inc();
        }
        let n = step(n);
        if n % 4 != 1 {
            self.bytes.inc_by(n * 10);
        }
        let n = step(n);
        if n % 2 == 0 {
            self.level.inc();
        } else {
            self.level.dec();
        }
        let n = step(n);
        if n % 3 != 0 {
            self.float_level.inc();
        } else {
            self.float_level.dec();
        }
        let n = step(n);
        if n % 7 < 4 {
            self.retries.inc();
        }
        let n = step(n);
        if n % 5 < 3 {
            self.seconds.observe(n as f64 / 4.0);
        }
        step(n);
    }
}

/// Work between two updates that the compiler keeps a call (its argument back).
#[inline(never)]
fn step(n: u64) -> u64 {
    black_box(n)
}

/// What ``tick(n)`` calls, told apart from the calls themselves.
fn count(calls: &mut Calls, n: u64) {
    if n % 3 == 0 {
        calls.made("branch_errors_total:inc");
    }
    if n % 4 != 1 {
        calls.made("branch_bytes_total:inc_by");
    }
    calls.made(if n % 2 == 0 { "branch_level:inc" } else { "branch_level:dec" });
    calls.made(if n % 3 != 0 { "branch_float_level:inc" } else { "branch_float_level:dec" });
    if n % 7 < 4 {
        calls.made("branch_retries_total:inc");
    }
    if n % 5 < 3 {
        calls.made("branch_seconds:observe");
        calls.observed.push(n as f64 / 4.0);
    }
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
    eprintln!("branches: {why}");
    eprintln!("usage: branches [-listen ADDR] [-period D] [-ticks N] [-linger D]");
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
    let metrics = Metrics::new(&reg);
    let listener = TcpListener::bind(&listen).unwrap_or_else(|e| usage(&format!("listen: {e}")));
    eprintln!("branches: pid {} serving http://{}/metrics", std::process::id(),
              listener.local_addr().unwrap());
    let served = reg.clone();
    thread::spawn(move || serve(listener, served));
    let mut calls = Calls::default();
    for n in 1..=ticks {
        thread::sleep(period);
        metrics.tick(black_box(n));
        count(&mut calls, n);
        if n == ticks {
            let made: Vec<String> = calls.made.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let seen: Vec<String> = calls.observed.iter().map(|v| format!("{v:?}")).collect();
            eprintln!("branches: calls {}", made.join(" "));
            eprintln!("branches: observed {}", seen.join(" "));
        }
        eprintln!("branches: tick {n}");
    }
    thread::sleep(linger);
}
