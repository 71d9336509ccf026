//! rust-loop is the Rust workload of noop's benchmarks: it makes one prometheus-crate
//! update in a tight loop and says how long each round took, so the cost noop adds to
//! one update can be measured (as examples/bench/go-loop does for client_golang).
//!
//! Each update is the whole of a function of its own (never inlined into the loop, nor
//! merged with another alike, so that a probe at its entry, as bpftrace's, counts the
//! updates; its first instruction a load of the metric, never the update itself: x86
//! uprobes refuse LOCK-prefixed instructions), inside which the crate's methods are
//! inlined as in any optimized build. The metrics are registered on the crate's
//! default registry.
//!
//! `-op OP -n CALLS -rounds R`: each round prints one JSON line,
//! `{"op": "counter.inc", "calls": 1000000, "ns": 5200000, "ns_per_call": 5.2}`, and the
//! end `{"final": 3000000, "calls_total": 3000000}` (the metric's value as the program
//! reads it). Ops: counter.inc, counter.inc_by (IntCounter, 3 a call), fcounter.inc_by
//! (Counter, 2.5), gauge.set, gauge.add, gauge.sub (Gauge, 2.5), intgauge.set,
//! histogram.observe, countervec.inc (a child looked up, then inc), local.flush (a local
//! counter's inc and flush).

use std::hint::black_box;
use std::time::Instant;

use prometheus::local::LocalIntCounter;
use prometheus::{Counter, Gauge, Histogram, IntCounter, IntCounterVec, IntGauge};

struct Metrics {
    counter: IntCounter,
    fcounter: Counter,
    gauge: Gauge,
    igauge: IntGauge,
    histogram: Histogram,
    requests: IntCounterVec,
}

#[inline(never)]
fn counter_inc(m: &Metrics) {
    black_box(m).counter.inc();
}

#[inline(never)]
fn counter_inc_by(m: &Metrics) {
    black_box(m).counter.inc_by(3);
}

#[inline(never)]
fn fcounter_inc_by(m: &Metrics) {
    black_box(m).fcounter.inc_by(1.5);
}

#[inline(never)]
fn gauge_set(m: &Metrics, i: u64) {
    black_box(m).gauge.set(i as f64);
}

#[inline(never)]
fn gauge_add(m: &Metrics) {
    black_box(m).gauge.add(2.5);
}

#[inline(never)]
fn gauge_sub(m: &Metrics) {
    black_box(m).gauge.sub(2.5);
}

#[inline(never)]
fn intgauge_set(m: &Metrics, i: u64) {
    black_box(m).igauge.set(i as i64);
}

#[inline(never)]
fn histogram_observe(m: &Metrics, i: u64) {
    black_box(m).histogram.observe((i % 10) as f64);
}

#[inline(never)]
fn countervec_inc(m: &Metrics) {
    black_box(m).requests.with_label_values(&["GET"]).inc();
}

#[inline(never)]
fn local_flush(local: &mut LocalIntCounter) {
    let local = black_box(local);
    local.inc();
    local.flush();
}

const OPS: [&str; 10] = ["counter.inc", "counter.inc_by", "fcounter.inc_by", "gauge.set",
                         "gauge.add", "gauge.sub", "intgauge.set", "histogram.observe",
                         "countervec.inc", "local.flush"];

fn run(m: &Metrics, local: &mut LocalIntCounter, op: &str, n: u64, start: u64) {
    let m = black_box(m);
    match op {
        "counter.inc" => (0..n).for_each(|_| counter_inc(m)),
        "counter.inc_by" => (0..n).for_each(|_| counter_inc_by(m)),
        "fcounter.inc_by" => (0..n).for_each(|_| fcounter_inc_by(m)),
        "gauge.set" => (start..start + n).for_each(|i| gauge_set(m, i + 1)),
        "gauge.add" => (0..n).for_each(|_| gauge_add(m)),
        "gauge.sub" => (0..n).for_each(|_| gauge_sub(m)),
        "intgauge.set" => (start..start + n).for_each(|i| intgauge_set(m, i + 1)),
        "histogram.observe" => (0..n).for_each(|i| histogram_observe(m, i)),
        "countervec.inc" => (0..n).for_each(|_| countervec_inc(m)),
        "local.flush" => (0..n).for_each(|_| local_flush(local)),
        _ => unreachable!(),
    }
}

fn final_value(m: &Metrics, op: &str) -> f64 {
    match op {
        "counter.inc" | "counter.inc_by" | "local.flush" => m.counter.get() as f64,
        "fcounter.inc_by" => m.fcounter.get(),  // 1.5 a call
        "gauge.set" | "gauge.add" | "gauge.sub" => m.gauge.get(),
        "intgauge.set" => m.igauge.get() as f64,
        "histogram.observe" => m.histogram.get_sample_count() as f64,
        _ => m.requests.with_label_values(&["GET"]).get() as f64,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: &str| -> String {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
            .unwrap_or_else(|| default.to_string())
    };
    let op = flag("-op", "counter.inc");
    let n: u64 = flag("-n", "1000000").parse().expect("-n: a number");
    let rounds: u64 = flag("-rounds", "3").parse().expect("-rounds: a number");
    if !OPS.contains(&op.as_str()) {
        eprintln!("rust-loop: unknown op {op} (ops: {})", OPS.join(", "));
        std::process::exit(2);
    }
    let m = Metrics {
        counter: prometheus::register_int_counter!("loop_calls_total", "Calls.").unwrap(),
        fcounter: prometheus::register_counter!("loop_float_total", "Float adds.").unwrap(),
        gauge: prometheus::register_gauge!("loop_gauge", "A gauge.").unwrap(),
        igauge: prometheus::register_int_gauge!("loop_int_gauge", "An int gauge.").unwrap(),
        histogram: prometheus::register_histogram!("loop_seconds", "Observations.",
                                                   vec![1.0, 2.5, 5.0, 7.5]).unwrap(),
        requests: prometheus::register_int_counter_vec!("loop_requests_total", "Requests.",
                                                        &["method"]).unwrap(),
    };
    let mut local = m.counter.local();
    for r in 0..rounds {
        let t0 = Instant::now();
        run(&m, &mut local, &op, n, r * n);
        let ns = t0.elapsed().as_nanos() as u64;
        println!("{{\"op\": \"{op}\", \"calls\": {n}, \"ns\": {ns}, \"ns_per_call\": {:.3}}}",
                 ns as f64 / n as f64);
    }
    println!("{{\"final\": {}, \"calls_total\": {}}}", final_value(&m, &op), n * rounds);
}
