//! rust-series registers -series metric objects on the prometheus crate's default
//! registry, as a large service would (as bench/programs/go-series does with
//! client_golang): a third of them the children of ten IntCounterVecs, the rest
//! counters and gauges of their own, every tenth of those a histogram of five buckets.
//! Each is updated once; then it serves /metrics and prints "listening ADDR". With
//! -move, every object is updated again every 100 ms (each value moves between any two
//! reads).

use std::io::{Read, Write};
use std::net::TcpListener;

use prometheus::{Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts,
                 TextEncoder};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let series: usize = args.iter().position(|a| a == "-series")
        .and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let moving = args.iter().any(|a| a == "-move");
    let reg = prometheus::default_registry();
    let mut updates: Vec<Box<dyn Fn() + Send>> = Vec::new();
    let children = series / 3;
    let vecs: Vec<IntCounterVec> = (0..10).map(|i| {
        let v = IntCounterVec::new(Opts::new(format!("bench_requests_{i}_total"),
                                             "Requests, by path."), &["path", "code"]).unwrap();
        reg.register(Box::new(v.clone())).unwrap();
        v
    }).collect();
    for c in 0..children {
        let child = vecs[c % 10].with_label_values(&[&format!("/api/v1/item/{c}"), "200"]);
        child.inc_by(c as u64);
        updates.push(Box::new(move || child.inc()));
    }
    let mut kept = Vec::new(); // every object stays alive
    for i in 0..series - children {
        let name = format!("bench_object_{i}");
        if i % 10 == 9 {
            let h = Histogram::with_opts(HistogramOpts::new(format!("{name}_seconds"),
                "A histogram.").buckets(vec![0.01, 0.1, 1.0, 10.0, 100.0])).unwrap();
            reg.register(Box::new(h.clone())).unwrap();
            h.observe((i % 50) as f64);
            let again = h.clone();
            updates.push(Box::new(move || again.observe(1.0)));
            kept.push(Box::new(h) as Box<dyn std::any::Any>);
        } else if i % 2 == 0 {
            let c = IntCounter::new(format!("{name}_total"), "A counter.").unwrap();
            reg.register(Box::new(c.clone())).unwrap();
            c.inc_by(i as u64);
            let again = c.clone();
            updates.push(Box::new(move || again.inc()));
            kept.push(Box::new(c));
        } else {
            let g = Gauge::new(name, "A gauge.").unwrap();
            reg.register(Box::new(g.clone())).unwrap();
            g.set(i as f64 / 3.0);
            let again = g.clone();
            updates.push(Box::new(move || again.inc()));
            kept.push(Box::new(g));
        }
    }
    if moving {
        std::thread::spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(100));
            for u in &updates {
                u();
            }
        });
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("listening {}", listener.local_addr().unwrap());
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request);
        let mut body = Vec::new();
        TextEncoder::new().encode(&prometheus::gather(), &mut body).unwrap();
        let head = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                            Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
    }
    drop(kept);
}
