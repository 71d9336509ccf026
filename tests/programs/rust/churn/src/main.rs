//! churn makes its metrics again for every request, as an exporter that builds a
//! registry per probe does: each round creates a fresh registry with the same metric
//! names, updates its metrics, gathers them (what such an exporter serves for that
//! request) and drops them, so that the allocator gives the next round's metrics the
//! addresses of this round's.
//!
//! It prints `ready`, starts its rounds when a line arrives on stdin, and prints at the
//! end, as JSON on one line, the truth per (metric, labels): the value the latest
//! round's metric held, the updates made over all rounds and the sum of their
//! increments (each round's metrics start at 0); then it stays `-linger` seconds.
//!
//! Flags: `-rounds N` (2000), `-pace MICROSECONDS` (300), `-linger SECONDS` (0).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::thread;
use std::time::Duration;

use prometheus::proto::MetricType;
use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts, Registry,
};

#[derive(Default)]
struct Series {
    value: f64,
    updates: u64,
    increments: f64,
}

type Truth = BTreeMap<(String, String), Series>;

fn add(t: &mut Truth, name: &str, labels: &str, updates: u64, inc: f64) {
    let s = t.entry((name.to_string(), labels.to_string())).or_default();
    s.updates += updates;
    s.increments += inc;
}

const KINDS: [&str; 3] = ["small", "medium", "large"];
const ROOMS: [&str; 2] = ["north", "south"];

/// One request: a registry of its own, its metrics made, updated and gathered.
#[inline(never)]
fn round(i: u64, t: &mut Truth) {
    let reg = Registry::new();
    let success = Gauge::new("churn_probe_success", "set(1) on two rounds of three").unwrap();
    let requests = IntCounter::new("churn_requests_total", "inc() 1 + round mod 4 times")
        .unwrap();
    let bytes = IntCounterVec::new(Opts::new("churn_bytes_total", "inc_by(round mod 7)"),
                                   &["kind"]).unwrap();
    let temperature = GaugeVec::new(Opts::new("churn_temperature", "add(0.25)"), &["room"])
        .unwrap();
    let latency = Histogram::with_opts(HistogramOpts::new("churn_latency_seconds",
                                                          "observe(round mod 5)")
        .buckets(vec![1.0, 2.0, 4.0])).unwrap();
    reg.register(Box::new(success.clone())).unwrap();
    reg.register(Box::new(requests.clone())).unwrap();
    reg.register(Box::new(bytes.clone())).unwrap();
    reg.register(Box::new(temperature.clone())).unwrap();
    reg.register(Box::new(latency.clone())).unwrap();

    let ok = if i % 3 == 0 { 0.0 } else { 1.0 };
    success.set(ok);
    add(t, "churn_probe_success", "", 1, ok);
    for _ in 0..=i % 4 {
        requests.inc();
    }
    add(t, "churn_requests_total", "", i % 4 + 1, (i % 4 + 1) as f64);
    let kind = KINDS[(i % 3) as usize];
    bytes.with_label_values(&[kind]).inc_by(i % 7);
    add(t, "churn_bytes_total", &format!("kind={kind}"), 1, (i % 7) as f64);
    let room = ROOMS[(i % 2) as usize];
    temperature.with_label_values(&[room]).add(0.25);
    add(t, "churn_temperature", &format!("room={room}"), 1, 0.25);
    latency.observe((i % 5) as f64);
    add(t, "churn_latency_seconds", "", 1, 1.0);

    for f in reg.gather() {
        for m in f.get_metric() {
            let labels: Vec<String> = m.get_label().iter()
                .map(|p| format!("{}={}", p.get_name(), p.get_value())).collect();
            let key = (f.get_name().to_string(), labels.join(","));
            let value = match f.get_field_type() {
                MetricType::COUNTER => m.get_counter().get_value(),
                MetricType::GAUGE => m.get_gauge().get_value(),
                _ => m.get_histogram().get_sample_count() as f64,
            };
            if let Some(s) = t.get_mut(&key) {
                s.value = value;
            }
        }
    }
}

fn flag(args: &[String], name: &str, default: u64) -> u64 {
    args.iter().position(|a| a == name)
        .and_then(|i| args.get(i + 1)).map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds = flag(&args, "-rounds", 2000);
    let pace = flag(&args, "-pace", 300);
    let linger = flag(&args, "-linger", 0);
    println!("ready");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let mut t = Truth::new();
    for i in 1..=rounds {
        round(i, &mut t);
        thread::sleep(Duration::from_micros(pace));
    }
    let series: Vec<String> = t.iter().map(|((name, labels), s)| format!(
        "{{\"name\":\"{name}\",\"labels\":\"{labels}\",\"value\":{},\"updates\":{},\
         \"increments\":{}}}", s.value, s.updates, s.increments)).collect();
    println!("{{\"rounds\":{rounds},\"series\":[{}]}}", series.join(","));
    thread::sleep(Duration::from_secs(linger));
}
