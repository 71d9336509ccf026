//! allops calls the prometheus crate's update methods that examples/rust-prometheus
//! does not: a float `Counter`'s `inc`, and `reset` of an `IntCounter` and of a
//! `Counter`, once each per tick; then keeps serving /metrics. What noop reports of it
//! is compared with that /metrics and with the calls made.
//!
//! Flags (as the examples'): `-listen ADDR`, `-period DURATION` (`30ms`), `-ticks N`,
//! `-linger DURATION`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use prometheus::{Counter, Encoder, IntCounter, Registry, TextEncoder};

struct Metrics {
    float_inc: Counter,
    int_reset: IntCounter,
    float_reset: Counter,
}

impl Metrics {
    fn new(reg: &Registry) -> Metrics {
        let m = Metrics {
            float_inc: Counter::new("ops_float_counter_inc", "inc() once per tick.").unwrap(),
            int_reset: IntCounter::new("ops_int_counter_reset", "reset() once per tick.")
                .unwrap(),
            float_reset: Counter::new("ops_float_counter_reset", "reset() once per tick.")
                .unwrap(),
        };
        reg.register(Box::new(m.float_inc.clone())).unwrap();
        reg.register(Box::new(m.int_reset.clone())).unwrap();
        reg.register(Box::new(m.float_reset.clone())).unwrap();
        m
    }

    #[inline(never)]
    fn tick(&self) {
        self.float_inc.inc();
        self.int_reset.reset();
        self.float_reset.reset();
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
    eprintln!("allops: {why}");
    eprintln!("usage: allops [-listen ADDR] [-period D] [-ticks N] [-linger D]");
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
    eprintln!("allops: pid {} serving http://{}/metrics", std::process::id(),
              listener.local_addr().unwrap());
    let served = reg.clone();
    thread::spawn(move || serve(listener, served));
    for n in 1..=ticks {
        thread::sleep(period);
        metrics.tick();
        eprintln!("allops: tick {n}");
    }
    thread::sleep(linger);
}
