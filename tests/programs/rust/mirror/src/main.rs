//! mirror keeps prometheus-crate metrics the way services do, for the tests of noop's
//! mirror (what it reads from this program's memory must equal what this program
//! serves). One mode a run, chosen by the first argument:
//!
//! - `full` (`-vec N`): every kind of metric (int and float counters and gauges,
//!   histograms, the *Vec of each) in four registries: the crate's default one, a
//!   `OnceLock<Registry>` with a prefix and common labels, a `LazyLock<Registry>`, and
//!   one only `main` holds (found through its gathers); label values that need
//!   escaping; bucket bounds Rust writes without an exponent; a custom collector;
//!   children removed, a *Vec reset, a counter unregistered and another of its name
//!   registered. Then it prints `listening ADDR` and changes nothing more.
//! - `members` (`-seed S -ids N -every N -pace MICROS -steps N -exec-after SECONDS`):
//!   as tests/programs/go/members: makes and removes the children of an IntCounterVec,
//!   and registers and unregisters counters (an odd id's: a *Vec of one child), in a
//!   sequence drawn from a seed (xorshift64*), each object for id i holding i+1; GET
//!   /step answers the steps made. Prints `listening ADDR` first.
//! - `torn` (`-observers N -pace MICROS -gatherers N`): observes 1.0 into a histogram
//!   (buckets 0.5 and 2) from N threads while others scrape its registry in a loop
//!   (gather and write out; each collect folds the cold shard into the hot one). Prints
//!   `ready`.
//! - `hostile` (`-ids N -exit-after SECONDS -exec-after SECONDS`): as
//!   tests/programs/go/hostile: makes and removes children and registers and
//!   unregisters counters and histograms (help "Of id i.") in a tight loop (a system
//!   call a step, as Go's maps a page for each object), mapping and unmapping a megabyte
//!   all along; exits or becomes /bin/sleep when told. Prints `ready` once its first
//!   objects exist.
//!
//! - `hot` (`-rounds N`): once a line arrives on stdin, updates in loops the compiler
//!   unrolls (a counter's inc nine times, a gauge set eight times, an int gauge added
//!   0 to 3), N rounds; then prints `{"hot_total": .., "hot_gauge": .., "hot_int_gauge":
//!   ..}` and the updates made of each.
//!
//! - `paced`: as tests/programs/go/paced: series moved at known, steady paces (each
//!   brought every millisecond to what its pace says it should hold by then):
//!   hot_total 5,000 incs a second, bulk_total inc_by(100) 10 times a second,
//!   warm_total 500, requests_total{code="200"} 300 and {code="500"} 30, level set to
//!   200 a second since start, latency_seconds observing 0.25 200 times a second,
//!   idle_total 7 once. Prints its pid and `listening ADDR`; answers each line on stdin
//!   with a JSON object of the counts it made and the seconds since it started.
//!
//! - `reuse`: prints `ready`; at the first line on stdin, makes its registry (the
//!   crate's default one) with a CounterVec and a HistogramVec (buckets 1, 10, 100)
//!   whose children lines make (`make ID`: each child of label id=ID holds ID+1, one
//!   observation of it) and remove (`remove ID`); it answers each with `ok`. The
//!   allocator gives the memory of children removed to the next made: the mirror's
//!   test of a child read at an address that became another's.
//!
//! Every mode serves GET /metrics (all its registries, gathered) and GET /step.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Counter, CounterVec, Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec,
    IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

static STEP: AtomicU64 = AtomicU64::new(0);
static APP: OnceLock<Registry> = OnceLock::new();
static LAZY: LazyLock<Registry> = LazyLock::new(Registry::new);
// what GET /metrics gathers besides the default registry and the statics
static SERVED: Mutex<Vec<Registry>> = Mutex::new(Vec::new());

const ESCAPED: [&str; 4] = ["quote\"d", "back\\slash", "new\nline", "ünïcødé"];

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    match args.iter().position(|a| a == &format!("-{name}")) {
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("mirror: -{name} needs a value");
            std::process::exit(2)
        }),
        None => default,
    }
}

fn gathered() -> Vec<MetricFamily> {
    let mut out = prometheus::gather();
    if let Some(app) = APP.get() {
        out.extend(app.gather());
    }
    out.extend(LAZY.gather());
    for r in SERVED.lock().unwrap().iter() {
        out.extend(r.gather());
    }
    out
}

fn serve(listener: TcpListener) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut request = [0u8; 1024];
        let n = stream.read(&mut request).unwrap_or(0);
        let line = String::from_utf8_lossy(&request[..n]);
        let (status, body) = if line.starts_with("GET /metrics") {
            let mut out = Vec::new();
            TextEncoder::new().encode(&gathered(), &mut out).unwrap();
            ("200 OK", out)
        } else if line.starts_with("GET /step") {
            ("200 OK", format!("{}\n", STEP.load(Ordering::SeqCst)).into_bytes())
        } else {
            ("404 Not Found", b"not found\n".to_vec())
        };
        let head = format!("HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
                            Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
    }
}

fn listen() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = listener.local_addr().unwrap().to_string();
    thread::spawn(move || serve(listener));
    addr
}

/// A collector of its own: noop lists it as not mirrored.
struct Custom {
    desc: Desc,
}

impl Collector for Custom {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        Vec::new()
    }
}

fn full(args: &[String]) {
    let children: usize = flag(args, "vec", 200);
    // the default registry, through the crate's macros
    let requests = prometheus::register_int_counter!("full_requests_total", "Requests.").unwrap();
    requests.inc_by(41);
    requests.inc();
    let latency = prometheus::register_histogram_vec!(
        "full_latency_seconds", "Latency, with bounds Rust writes without an exponent.",
        &["route"], vec![1e-7, 0.005, 0.25, 1.0, 2.5, 1e6, 1e21]).unwrap();
    for (i, v) in [0.0, 1e-8, 0.004, 0.3, 0.3, 2.0, 7.5, 2e6, 1e22].iter().enumerate() {
        latency.with_label_values(&[if i % 2 == 0 { "/a" } else { "/b" }]).observe(*v);
    }
    let temperature = prometheus::register_gauge!("full_temperature_celsius", "A float gauge.")
        .unwrap();
    temperature.set(-12.625);

    // a static registry with a prefix and common labels
    let app = APP.get_or_init(|| {
        let labels = HashMap::from([("region".to_string(), "eu-1".to_string())]);
        Registry::new_custom(Some("app".to_string()), Some(labels)).unwrap()
    });
    let ratio = Counter::new("ratio_total", "A float counter: 0.1 added ten times.").unwrap();
    for _ in 0..10 {
        ratio.inc_by(0.1);
    }
    app.register(Box::new(ratio.clone())).unwrap();
    let queue = IntGauge::with_opts(Opts::new("queue_depth", "An int gauge.")
        .const_label("queue", "main")).unwrap();
    queue.set(-7);
    app.register(Box::new(queue.clone())).unwrap();
    let names = GaugeVec::new(Opts::new("label_gauge", "Label values that need escaping."),
                              &["value"]).unwrap();
    for (i, v) in ESCAPED.iter().enumerate() {
        names.with_label_values(&[v]).set(i as f64 + 0.5);
    }
    app.register(Box::new(names.clone())).unwrap();
    let slots = IntGaugeVec::new(Opts::new("slots", "An IntGaugeVec."), &["pool", "kind"])
        .unwrap();
    slots.with_label_values(&["a", "x"]).set(3);
    slots.with_label_values(&["b", "y"]).add(-4);
    app.register(Box::new(slots.clone())).unwrap();

    // a LazyLock<Registry>: a *Vec of many children (a table of many buckets), a
    // HistogramVec, a custom collector
    let bytes = CounterVec::new(Opts::new("lazy_bytes_total", "Many children."), &["shard"])
        .unwrap();
    for i in 0..children {
        bytes.with_label_values(&[&i.to_string()]).inc_by(i as f64 * 0.5 + 1.0);
    }
    LAZY.register(Box::new(bytes.clone())).unwrap();
    let sizes = HistogramVec::new(HistogramOpts::new("lazy_sizes", "A HistogramVec.")
        .buckets(vec![10.0, 100.0]), &["kind"]).unwrap();
    sizes.with_label_values(&["small"]).observe(3.0);
    sizes.with_label_values(&["large"]).observe(300.0);
    sizes.with_label_values(&["large"]).observe(30.0);
    LAZY.register(Box::new(sizes.clone())).unwrap();
    let custom = Custom {
        desc: Desc::new("lazy_custom".into(), "A collector of its own.".into(), vec![],
                        HashMap::new()).unwrap(),
    };
    LAZY.register(Box::new(custom)).unwrap();

    // a registry only main holds: churn before the quiet
    let local = Registry::new();
    let calls = IntCounterVec::new(Opts::new("local_calls_total", "Removed and reset children.")
        .const_label("service", "api"), &["method", "code"]).unwrap();
    for (m, c) in [("GET", "200"), ("GET", "500"), ("POST", "200"), ("PUT", "404")] {
        calls.with_label_values(&[m, c]).inc_by(5);
    }
    calls.remove_label_values(&["GET", "500"]).unwrap();
    local.register(Box::new(calls.clone())).unwrap();
    let reset = GaugeVec::new(Opts::new("local_reset", "Reset, then one child made again."),
                              &["id"]).unwrap();
    for i in 0..5 {
        reset.with_label_values(&[&i.to_string()]).set(i as f64);
    }
    reset.reset();
    reset.with_label_values(&["9"]).set(9.0);
    local.register(Box::new(reset.clone())).unwrap();
    let old = IntCounter::new("local_again_total", "Registered again.").unwrap();
    old.inc_by(100);
    local.register(Box::new(old.clone())).unwrap();
    local.unregister(Box::new(old.clone())).unwrap();
    drop(old);
    let again = IntCounter::new("local_again_total", "Registered again.").unwrap();
    again.inc_by(3);
    local.register(Box::new(again.clone())).unwrap();
    let seen = Histogram::with_opts(HistogramOpts::new("local_seen_seconds", "Const labels.")
        .const_label("zone", "b").buckets(vec![0.5, 1.5])).unwrap();
    for v in [0.25, 1.0, 1.0, 4.0] {
        seen.observe(v);
    }
    local.register(Box::new(seen.clone())).unwrap();
    let up = Gauge::new("local_up", "Set to 1.").unwrap();
    up.set(1.0);
    local.register(Box::new(up.clone())).unwrap();
    SERVED.lock().unwrap().push(local.clone());

    println!("listening {}", listen());
    loop {
        thread::sleep(Duration::from_secs(3600));
        // kept alive: every metric above is still registered and held
        let _ = (&requests, &latency, &temperature, &ratio, &queue, &names, &slots, &bytes,
                 &sizes, &calls, &reset, &again, &seen, &up, &local);
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(2685821657736338717)
    }
}

fn exec_after(seconds: f64) {
    if seconds > 0.0 {
        thread::spawn(move || {
            thread::sleep(Duration::from_secs_f64(seconds));
            use std::os::unix::process::CommandExt;
            let err = std::process::Command::new("/bin/sleep").arg("60").arg0("sleep").exec();
            eprintln!("mirror: exec: {err}");
        });
    }
}

fn members(args: &[String]) {
    let seed: u64 = flag(args, "seed", 1);
    let ids: u64 = flag(args, "ids", 64);
    let every: u64 = flag(args, "every", 16);
    let pace: u64 = flag(args, "pace", 200);
    let steps: u64 = flag(args, "steps", 0);
    exec_after(flag(args, "exec-after", 0.0));
    let reg = prometheus::default_registry(); // a static holds it: found alone
    let vec = IntCounterVec::new(Opts::new("members_total", "One child an id, made and removed."),
                                 &["id"]).unwrap();
    reg.register(Box::new(vec.clone())).unwrap();
    println!("listening {}", listen());
    let mut r = Rng(seed);
    let mut children: HashMap<u64, bool> = HashMap::new();
    let mut counters: HashMap<u64, Box<dyn Collector>> = HashMap::new();
    let mut n = 1u64;
    while steps == 0 || n <= steps {
        if pace > 0 {
            thread::sleep(Duration::from_micros(pace));
        }
        let id = r.next() % ids;
        let name = id.to_string();
        if n % every == 0 {
            if let Some(c) = counters.remove(&id) {
                reg.unregister(c).unwrap();
            } else if id % 2 == 0 {
                let c = IntCounter::new(format!("members_extra_{name}_total"), "A counter an id.")
                    .unwrap();
                c.inc_by(id + 1);
                reg.register(Box::new(c.clone())).unwrap();
                counters.insert(id, Box::new(c));
            } else {
                let v = IntCounterVec::new(Opts::new(format!("members_extra_{name}_total"),
                                                     "A *Vec an id."), &["id"]).unwrap();
                v.with_label_values(&[&name]).inc_by(id + 1);
                reg.register(Box::new(v.clone())).unwrap();
                counters.insert(id, Box::new(v));
            }
        } else if children.remove(&id).is_some() {
            vec.remove_label_values(&[&name]).unwrap();
        } else {
            vec.with_label_values(&[&name]).inc_by(id + 1);
            children.insert(id, true);
        }
        STEP.store(n, Ordering::SeqCst);
        n += 1;
    }
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

fn torn(args: &[String]) {
    let observers: usize = flag(args, "observers", 2);
    let pace: u64 = flag(args, "pace", 20);
    let gatherers: usize = flag(args, "gatherers", 1);
    let h = prometheus::register_histogram!(HistogramOpts::new("torn_histogram", "Ones.")
        .buckets(vec![0.5, 2.0])).unwrap();
    let started = Arc::new(AtomicU64::new(0));
    for _ in 0..observers {
        let (h, started) = (h.clone(), started.clone());
        thread::spawn(move || {
            started.fetch_add(1, Ordering::SeqCst);
            loop {
                h.observe(1.0);
                if pace > 0 {
                    thread::sleep(Duration::from_micros(pace));
                }
            }
        });
    }
    for _ in 0..gatherers {
        let started = started.clone();
        thread::spawn(move || {
            started.fetch_add(1, Ordering::SeqCst);
            let mut out = Vec::new();
            loop {
                // a scrape of its own: gathered, then written out
                out.clear();
                TextEncoder::new().encode(&prometheus::gather(), &mut out).unwrap();
            }
        });
    }
    while started.load(Ordering::SeqCst) < (observers + gatherers) as u64 {
        thread::sleep(Duration::from_millis(1));
    }
    println!("ready");
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

fn hostile(args: &[String]) {
    let ids: u64 = flag(args, "ids", 48);
    let exit_after: f64 = flag(args, "exit-after", 0.0);
    let exec: f64 = flag(args, "exec-after", 0.0);
    let reg = prometheus::default_registry();
    let vec = IntCounterVec::new(Opts::new("hostile_total", "One child an id."), &["id"])
        .unwrap();
    reg.register(Box::new(vec.clone())).unwrap();
    let start = Instant::now();
    let mut r = Rng(0x2545F4914F6CDD1D);
    let mut children: HashMap<u64, bool> = HashMap::new();
    let mut collectors: HashMap<u64, Box<dyn Collector>> = HashMap::new();
    let mut big: Option<Vec<u8>> = None; // a megabyte: malloc maps and unmaps it
    let mut n = 1u64;
    loop {
        if n == 4 * ids {
            println!("ready");
        }
        if n % 64 == 0 {
            let since = start.elapsed().as_secs_f64();
            if exit_after > 0.0 && since > exit_after {
                std::process::exit(0);
            }
            if exec > 0.0 && since > exec {
                use std::os::unix::process::CommandExt;
                let err = std::process::Command::new("/bin/sleep").arg("60").arg0("sleep").exec();
                eprintln!("mirror: exec: {err}");
            }
            big = match big {
                Some(_) => None,
                None => Some(vec![1u8; 1 << 20]),
            };
        }
        // a system call a step, as the Go program's mapping of a page for each object
        thread::yield_now();
        let id = r.next() % ids;
        n += 1;
        if n % 8 == 0 {
            if let Some(c) = collectors.remove(&id) {
                reg.unregister(c).unwrap();
                continue;
            }
            let name = format!("hostile_{id}_total");
            let help = format!("Of id {id}.");
            // a clone registered, one kept: the registry unregisters by the Descs' ids
            let (registered, kept): (Box<dyn Collector>, Box<dyn Collector>) = if id % 2 == 0 {
                let k = Counter::new(name, help).unwrap();
                k.inc_by((id + 1) as f64);
                (Box::new(k.clone()), Box::new(k))
            } else {
                let h = Histogram::with_opts(HistogramOpts::new(name, help)
                    .buckets(vec![1.0, 10.0, 100.0])).unwrap();
                h.observe((id + 1) as f64);
                (Box::new(h.clone()), Box::new(h))
            };
            if reg.register(registered).is_ok() {
                collectors.insert(id, kept);
            }
            continue;
        }
        if children.remove(&id).is_some() {
            let _ = vec.remove_label_values(&[&id.to_string()]);
        } else {
            vec.with_label_values(&[&id.to_string()]).inc_by(id + 1);
            children.insert(id, true);
        }
        STEP.store(n, Ordering::SeqCst);
    }
}

fn reuse() {
    println!("ready");
    let mut vecs: Option<(IntCounterVec, HistogramVec)> = None;
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        // the registry and its *Vecs made at the first line: a process found before
        let (counters, histograms) = vecs.get_or_insert_with(|| {
            let reg = prometheus::default_registry();
            let counters =
                IntCounterVec::new(Opts::new("reused_total", "One child an id."), &["id"]).unwrap();
            let histograms = HistogramVec::new(
                HistogramOpts::new("reused_seconds", "One child an id.")
                    .buckets(vec![1.0, 10.0, 100.0]),
                &["id"],
            )
            .unwrap();
            reg.register(Box::new(counters.clone())).unwrap();
            reg.register(Box::new(histograms.clone())).unwrap();
            (counters, histograms)
        });
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["make", id] => {
                let n: u64 = id.parse().unwrap();
                counters.with_label_values(&[id]).inc_by(n + 1);
                histograms.with_label_values(&[id]).observe((n + 1) as f64);
            }
            ["remove", id] => {
                counters.remove_label_values(&[id]).unwrap();
                histograms.remove_label_values(&[id]).unwrap();
            }
            _ => panic!("mirror reuse: {line:?}"),
        }
        println!("ok");
        line.clear();
    }
}

#[inline(never)]
fn hot_round(c: &IntCounter, g: &Gauge, ig: &IntGauge, round: u64) {
    for _ in 0..9 {
        std::hint::black_box(c).inc();
    }
    for i in 0..8u64 {
        std::hint::black_box(g).set((round * 8 + i) as f64);
    }
    for i in 0..4i64 {
        std::hint::black_box(ig).add(i);
    }
}

fn hot(args: &[String]) {
    let rounds: u64 = flag(args, "rounds", 200);
    let c = prometheus::register_int_counter!("hot_total", "Nine a round.").unwrap();
    let g = prometheus::register_gauge!("hot_gauge", "Set eight times a round.").unwrap();
    let ig = prometheus::register_int_gauge!("hot_int_gauge", "Six a round.").unwrap();
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    for round in 0..rounds {
        hot_round(&c, &g, &ig, round);
        thread::sleep(Duration::from_millis(2));
    }
    println!("{{\"hot_total\": {}, \"hot_gauge\": {}, \"hot_int_gauge\": {}, \
              \"updates\": {{\"hot_total\": {}, \"hot_gauge\": {}, \"hot_int_gauge\": {}}}}}",
             c.get(), g.get(), ig.get(), 9 * rounds, 8 * rounds, 3 * rounds);
}

fn paced() {
    let hot = prometheus::register_int_counter!("hot_total", "5000 a second.").unwrap();
    let bulk = prometheus::register_int_counter!("bulk_total", "100, 10 times a second.")
        .unwrap();
    let warm = prometheus::register_int_counter!("warm_total", "500 a second.").unwrap();
    let requests = prometheus::register_int_counter_vec!("requests_total", "By code.",
                                                         &["code"]).unwrap();
    let level = prometheus::register_gauge!("level", "200 a second since start.").unwrap();
    let latency = prometheus::register_histogram!(HistogramOpts::new(
        "latency_seconds", "0.25, 200 times a second.").buckets(vec![0.1, 0.5, 1.0])).unwrap();
    let idle = prometheus::register_int_counter!("idle_total", "Never moves.").unwrap();
    idle.inc_by(7);
    let (ok, fail) = (requests.with_label_values(&["200"]), requests.with_label_values(&["500"]));
    let updates: Vec<(&str, f64, Box<dyn Fn() + Send>)> = vec![
        ("hot_total", 5000.0, Box::new(move || hot.inc())),
        ("bulk_updates", 10.0, Box::new(move || bulk.inc_by(100))),
        ("warm_total", 500.0, Box::new(move || warm.inc())),
        ("requests_200", 300.0, Box::new(move || ok.inc())),
        ("requests_500", 30.0, Box::new(move || fail.inc())),
        ("latency_observations", 200.0, Box::new(move || latency.observe(0.25))),
    ];
    let done: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(vec![0; updates.len()]));
    let names: Vec<&str> = updates.iter().map(|u| u.0).collect();
    let start = std::time::Instant::now();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("{}", std::process::id());
    println!("listening {}", listener.local_addr().unwrap());
    thread::spawn(move || serve(listener));
    let counts = done.clone();
    thread::spawn(move || loop {
        {
            let mut d = counts.lock().unwrap();
            let elapsed = start.elapsed().as_secs_f64();
            for (i, (_, every, update)) in updates.iter().enumerate() {
                let want = (elapsed * every) as u64;
                while d[i] < want {
                    update();
                    d[i] += 1;
                }
            }
            level.set(((elapsed * 200.0) as u64) as f64);
        }
        thread::sleep(Duration::from_millis(1));
    });
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        let d = done.lock().unwrap();
        let mut out = format!("{{\"seconds\": {}", start.elapsed().as_secs_f64());
        for (name, n) in names.iter().zip(d.iter()) {
            out += &format!(", \"{name}\": {n}");
        }
        println!("{out}}}");
        line.clear();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("full") => full(&args[1..]),
        Some("members") => members(&args[1..]),
        Some("torn") => torn(&args[1..]),
        Some("hostile") => hostile(&args[1..]),
        Some("hot") => hot(&args[1..]),
        Some("paced") => paced(),
        Some("reuse") => reuse(),
        _ => {
            eprintln!("usage: mirror full|members|torn|hostile|hot|paced|reuse [flags]");
            std::process::exit(2)
        }
    }
}
