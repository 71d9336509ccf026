//! rust-prometheus is the Rust example service noop is tried on: a program that
//! updates a fixed set of `prometheus`-crate metrics on every tick, from several
//! threads at once, and serves them on /metrics, so that what noop reads from its
//! memory can be compared with what it says about itself.
//!
//! Flags (as the Go example's): `-listen ADDR` (loopback address:port for /metrics,
//! port 0 picks one), `-period DURATION` (`30ms`, `1s`), `-ticks N` (0: until
//! killed), `-linger DURATION` (keep serving after the last tick), `-threads N`
//! (updater threads; each makes every update of a tick).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use prometheus::{
    Counter, Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge,
    Opts, Registry, TextEncoder,
};

struct Metrics {
    fake_counter: IntCounter,
    another_fake_counter: IntCounter,
    fake_gauge: Gauge,
    another_fake_gauge: Gauge,
    sub_fake_gauge: Gauge,
    dec_fake_gauge: IntGauge,
    set_fake_gauge: Gauge,
    set_int_gauge: IntGauge,
    add_int_gauge: IntGauge,
    float_fake_counter: Counter,
    int_fake_counter: IntCounter,
    tick_float_counter: Counter,
    dec_float_gauge: Gauge,
    inc_int_gauge: IntGauge,
    fake_histogram: Histogram,
    requests: IntCounterVec,
}

const METHODS: [&str; 2] = ["GET", "POST"];
const CODES: [&str; 3] = ["200", "404", "500"];

impl Metrics {
    fn new(reg: &Registry) -> Metrics {
        let m = Metrics {
            fake_counter: IntCounter::new("fake_counter", "Incremented once per tick.").unwrap(),
            another_fake_counter: IntCounter::new("another_fake_counter",
                                                  "Incremented twice per tick.").unwrap(),
            fake_gauge: Gauge::new("fake_gauge", "Inc once per tick.").unwrap(),
            another_fake_gauge: Gauge::new("another_fake_gauge", "Add(5) once per tick.").unwrap(),
            sub_fake_gauge: Gauge::new("sub_fake_gauge", "Sub(7) once per tick.").unwrap(),
            dec_fake_gauge: IntGauge::new("dec_fake_gauge", "Dec once per tick.").unwrap(),
            set_fake_gauge: Gauge::new("fake_set_gauge",
                                       "Set to 1.5 times the tick number.").unwrap(),
            set_int_gauge: IntGauge::new("fake_set_int_gauge",
                                         "Set to the tick number.").unwrap(),
            add_int_gauge: IntGauge::new("fake_add_int_gauge",
                                         "Add(4) then Sub(1) once per tick.").unwrap(),
            float_fake_counter: Counter::new("fake_float_counter",
                                             "inc_by(0.25) once per tick.").unwrap(),
            int_fake_counter: IntCounter::new("fake_int_counter",
                                              "inc_by(3) once per tick.").unwrap(),
            tick_float_counter: Counter::with_opts(
                Opts::new("fake_tick_float_counter", "inc_by(half the tick number) once per tick.")
                    .const_label("source", "tick")).unwrap(),
            dec_float_gauge: Gauge::new("fake_dec_float_gauge", "Dec once per tick.").unwrap(),
            inc_int_gauge: IntGauge::new("fake_inc_int_gauge", "Inc once per tick.").unwrap(),
            fake_histogram: Histogram::with_opts(
                HistogramOpts::new("fake_histogram",
                                   "Observes the tick number modulo 10 once per tick.")
                    .buckets(vec![1.0, 2.5, 5.0, 7.5])).unwrap(),
            requests: IntCounterVec::new(
                Opts::new("fake_requests_total", "Fake requests by method and code."),
                &["method", "code"]).unwrap(),
        };
        reg.register(Box::new(m.fake_counter.clone())).unwrap();
        reg.register(Box::new(m.another_fake_counter.clone())).unwrap();
        reg.register(Box::new(m.fake_gauge.clone())).unwrap();
        reg.register(Box::new(m.another_fake_gauge.clone())).unwrap();
        reg.register(Box::new(m.sub_fake_gauge.clone())).unwrap();
        reg.register(Box::new(m.dec_fake_gauge.clone())).unwrap();
        reg.register(Box::new(m.set_fake_gauge.clone())).unwrap();
        reg.register(Box::new(m.set_int_gauge.clone())).unwrap();
        reg.register(Box::new(m.add_int_gauge.clone())).unwrap();
        reg.register(Box::new(m.float_fake_counter.clone())).unwrap();
        reg.register(Box::new(m.int_fake_counter.clone())).unwrap();
        reg.register(Box::new(m.tick_float_counter.clone())).unwrap();
        reg.register(Box::new(m.dec_float_gauge.clone())).unwrap();
        reg.register(Box::new(m.inc_int_gauge.clone())).unwrap();
        reg.register(Box::new(m.fake_histogram.clone())).unwrap();
        reg.register(Box::new(m.requests.clone())).unwrap();
        m
    }

    /// Every update of tick `n`, as one updater thread makes them.
    fn tick(&self, n: u64) {
        self.fake_counter.inc();
        self.another_fake_counter.inc();
        self.another_fake_counter.inc();
        self.fake_gauge.inc();
        self.another_fake_gauge.add(5.0);
        self.sub_fake_gauge.sub(7.0);
        self.dec_fake_gauge.dec();
        self.set_fake_gauge.set(n as f64 * 1.5);
        self.set_int_gauge.set(n as i64);
        self.add_int_gauge.add(4);
        self.add_int_gauge.sub(1);
        self.float_fake_counter.inc_by(0.25);
        self.int_fake_counter.inc_by(3);
        self.tick_float_counter.inc_by(n as f64 * 0.5); // known only at run time
        self.dec_float_gauge.dec();
        self.inc_int_gauge.inc();
        self.fake_histogram.observe((n % 10) as f64);
        self.requests
            .with_label_values(&[METHODS[(n % 2) as usize], CODES[(n % 3) as usize]])
            .inc();
    }
}

fn duration(flag: &str, text: &str) -> Duration {
    let (number, unit) = text.split_at(text.find(|c: char| c.is_alphabetic()).unwrap_or(text.len()));
    let value: f64 = number.parse().unwrap_or_else(|_| usage(&format!("{flag}: not a duration: {text}")));
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" | "" => value,
        "m" => value * 60.0,
        _ => usage(&format!("{flag}: unit {unit:?} (use ms, s or m)")),
    };
    Duration::from_secs_f64(seconds)
}

fn usage(why: &str) -> ! {
    eprintln!("rust-prometheus: {why}");
    eprintln!("usage: rust-prometheus [-listen ADDR] [-period D] [-ticks N] [-linger D] [-threads N]");
    std::process::exit(2)
}

fn serve(listener: TcpListener, reg: Registry) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut request = [0u8; 1024];
        let n = stream.read(&mut request).unwrap_or(0);
        let line = String::from_utf8_lossy(&request[..n]);
        let (status, body) = if line.starts_with("GET /metrics") {
            let mut out = Vec::new();
            TextEncoder::new().encode(&reg.gather(), &mut out).unwrap();
            ("200 OK", out)
        } else {
            ("404 Not Found", b"not found\n".to_vec())
        };
        let head = format!("HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
                            Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
    }
}

fn main() {
    let mut listen = "127.0.0.1:9092".to_string();
    let mut period = Duration::from_secs(1);
    let mut ticks = 0u64;
    let mut linger = Duration::ZERO;
    let mut threads = 2usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].trim_start_matches('-');
        let value = args.get(i + 1).cloned().unwrap_or_else(|| usage(&format!("-{flag} needs a value")));
        match flag {
            "listen" => listen = value,
            "period" => period = duration("-period", &value),
            "ticks" => ticks = value.parse().unwrap_or_else(|_| usage("-ticks: not a number")),
            "linger" => linger = duration("-linger", &value),
            "threads" => threads = value.parse().unwrap_or_else(|_| usage("-threads: not a number")),
            _ => usage(&format!("unknown flag -{flag}")),
        }
        i += 2;
    }
    if period.is_zero() || threads == 0 {
        usage("-period and -threads must be positive");
    }
    let reg = Registry::new();
    let metrics = Arc::new(Metrics::new(&reg));
    let listener = TcpListener::bind(&listen).unwrap_or_else(|e| {
        eprintln!("rust-prometheus: listen on {listen}: {e}");
        std::process::exit(1)
    });
    eprintln!("rust-prometheus: pid {} serving http://{}/metrics, tick every {:?}, {} threads",
              std::process::id(), listener.local_addr().unwrap(), period, threads);
    let served = reg.clone();
    thread::spawn(move || serve(listener, served));
    // Each tick, every updater thread makes all of the tick's updates at once.
    let start = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(Barrier::new(threads + 1));
    let tick = Arc::new(std::sync::atomic::AtomicU64::new(0));
    for _ in 0..threads {
        let (m, start, done, tick) = (metrics.clone(), start.clone(), done.clone(), tick.clone());
        thread::spawn(move || loop {
            start.wait();
            m.tick(tick.load(std::sync::atomic::Ordering::SeqCst));
            done.wait();
        });
    }
    let mut n = 1;
    while ticks == 0 || n <= ticks {
        thread::sleep(period);
        tick.store(n, std::sync::atomic::Ordering::SeqCst);
        start.wait();
        done.wait();
        eprintln!("rust-prometheus: tick {n}");
        n += 1;
    }
    thread::sleep(linger);
}
