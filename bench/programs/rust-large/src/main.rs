//! A prometheus-crate service of the size real ones reach (tens of MB of debug info):
//! many generic components, each instantiated for several types, beside the metrics
//! noop's preset mirrors. Built for bench/startup.py's large-binary arms.

use indexmap::IndexMap;
use petgraph::graph::Graph;
use prometheus::{Counter, Gauge, Histogram, HistogramOpts, IntCounterVec, Opts, Registry};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;

macro_rules! component {
    ($($m:ident),*) => {$(
        mod $m {
            use super::*;

            #[derive(Serialize, Default, Clone, Debug)]
            pub struct Record<T: Clone + Default> {
                pub id: u64,
                pub name: String,
                pub value: T,
                pub tags: Vec<String>,
                pub children: IndexMap<String, T>,
            }

            pub fn build<T: Clone + Default + Send + Sync + std::fmt::Debug>(n: usize, v: T)
                -> Vec<Record<T>> {
                (0..n).into_par_iter().map(|i| Record {
                    id: i as u64, name: format!("{}-{}", stringify!($m), i), value: v.clone(),
                    tags: vec![format!("{:?}", v)], children: IndexMap::new() }).collect()
            }

            pub fn graph<T: Clone + Default + std::fmt::Debug>(records: &[Record<T>]) -> usize {
                let mut g: Graph<String, u64> = Graph::new();
                let nodes: Vec<_> = records.iter().map(|r| g.add_node(r.name.clone())).collect();
                for w in nodes.windows(2) {
                    g.add_edge(w[0], w[1], 1);
                }
                petgraph::algo::dijkstra(&g, nodes[0], None, |e| *e.weight()).len()
            }

            pub async fn serve(counter: Counter, n: usize) -> usize {
                let a = build(n, 1u64);
                let b = build(n, 2.5f64);
                let c = build(n, String::from("x"));
                let d: HashMap<u64, usize> = a.iter().map(|r| (r.id, r.tags.len())).collect();
                counter.inc();
                graph(&a) + graph(&b) + graph(&c) + d.len()
            }
        }
    )*};
}

component!(c00, c01, c02, c03, c04, c05, c06, c07, c08, c09, c10, c11, c12, c13, c14, c15,
           c16, c17, c18, c19, c20, c21, c22, c23, c24, c25, c26, c27, c28, c29, c30, c31,
           c32, c33, c34, c35, c36, c37, c38, c39, c40, c41, c42, c43, c44, c45, c46, c47,
           c48, c49, c50, c51, c52, c53, c54, c55, c56, c57, c58, c59, c60, c61, c62, c63);

#[tokio::main]
async fn main() {
    let registry = Registry::new();
    let served = Counter::new("large_served_total", "components served").unwrap();
    let depth = Gauge::new("large_depth", "graph depth").unwrap();
    let latency = Histogram::with_opts(HistogramOpts::new("large_seconds", "a pass")).unwrap();
    let by = IntCounterVec::new(Opts::new("large_by_total", "by component"), &["c"]).unwrap();
    for m in [Box::new(served.clone()) as Box<dyn prometheus::core::Collector>,
              Box::new(depth.clone()), Box::new(latency.clone()), Box::new(by.clone())] {
        registry.register(m).unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("listening on {}", listener.local_addr().unwrap());
    loop {
        let timer = latency.start_timer();
        let mut total = 0;
        total += c00::serve(served.clone(), 4).await; total += c01::serve(served.clone(), 4).await;
        total += c02::serve(served.clone(), 4).await; total += c03::serve(served.clone(), 4).await;
        total += c04::serve(served.clone(), 4).await; total += c05::serve(served.clone(), 4).await;
        total += c06::serve(served.clone(), 4).await; total += c07::serve(served.clone(), 4).await;
        total += c08::serve(served.clone(), 4).await; total += c09::serve(served.clone(), 4).await;
        total += c10::serve(served.clone(), 4).await; total += c11::serve(served.clone(), 4).await;
        total += c12::serve(served.clone(), 4).await; total += c13::serve(served.clone(), 4).await;
        total += c14::serve(served.clone(), 4).await; total += c15::serve(served.clone(), 4).await;
        total += c16::serve(served.clone(), 4).await; total += c17::serve(served.clone(), 4).await;
        total += c18::serve(served.clone(), 4).await; total += c19::serve(served.clone(), 4).await;
        total += c20::serve(served.clone(), 4).await; total += c21::serve(served.clone(), 4).await;
        total += c22::serve(served.clone(), 4).await; total += c23::serve(served.clone(), 4).await;
        total += c24::serve(served.clone(), 4).await; total += c25::serve(served.clone(), 4).await;
        total += c26::serve(served.clone(), 4).await; total += c27::serve(served.clone(), 4).await;
        total += c28::serve(served.clone(), 4).await; total += c29::serve(served.clone(), 4).await;
        total += c30::serve(served.clone(), 4).await; total += c31::serve(served.clone(), 4).await;
        total += c32::serve(served.clone(), 4).await; total += c33::serve(served.clone(), 4).await;
        total += c34::serve(served.clone(), 4).await; total += c35::serve(served.clone(), 4).await;
        total += c36::serve(served.clone(), 4).await; total += c37::serve(served.clone(), 4).await;
        total += c38::serve(served.clone(), 4).await; total += c39::serve(served.clone(), 4).await;
        total += c40::serve(served.clone(), 4).await; total += c41::serve(served.clone(), 4).await;
        total += c42::serve(served.clone(), 4).await; total += c43::serve(served.clone(), 4).await;
        total += c44::serve(served.clone(), 4).await; total += c45::serve(served.clone(), 4).await;
        total += c46::serve(served.clone(), 4).await; total += c47::serve(served.clone(), 4).await;
        total += c48::serve(served.clone(), 4).await; total += c49::serve(served.clone(), 4).await;
        total += c50::serve(served.clone(), 4).await; total += c51::serve(served.clone(), 4).await;
        total += c52::serve(served.clone(), 4).await; total += c53::serve(served.clone(), 4).await;
        total += c54::serve(served.clone(), 4).await; total += c55::serve(served.clone(), 4).await;
        total += c56::serve(served.clone(), 4).await; total += c57::serve(served.clone(), 4).await;
        total += c58::serve(served.clone(), 4).await; total += c59::serve(served.clone(), 4).await;
        total += c60::serve(served.clone(), 4).await; total += c61::serve(served.clone(), 4).await;
        total += c62::serve(served.clone(), 4).await; total += c63::serve(served.clone(), 4).await;
        depth.set(total as f64);
        by.with_label_values(&["all"]).inc();
        timer.observe_duration();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
