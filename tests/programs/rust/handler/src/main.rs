//! A test target for async functions: a tokio handler whose calls suspend (each is
//! polled more than once), and some of which are cancelled by a timeout.
//!
//! Calls are awaited three ways: directly (the future is built and first polled in
//! the caller's own poll), through a timeout (polled by `Timeout::poll`), and as a
//! spawned task (polled by the runtime). `handler N` makes N calls of `handle` and
//! prints, for each, one JSON line with what it passed, what it returned (or that it
//! was cancelled) and how long it took, around the whole await.

use std::time::{Duration, Instant};

pub struct Request {
    pub id: u64,
    pub path: String,
    pub weight: u32,
}

pub async fn handle(req: Request, delay_ms: u64) -> u64 {
    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    tokio::task::yield_now().await;
    req.id * 10 + req.weight as u64 + req.path.len() as u64
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    for i in 0..n {
        let req = Request { id: 100 + i, path: format!("/orders/{}", i * 7), weight: (i % 5) as u32 };
        let (id, path, weight) = (req.id, req.path.clone(), req.weight);
        let cancel = i % 4 == 3;
        let delay = if cancel { 200 } else { 2 + i % 3 };
        let start = Instant::now();
        let got = if cancel {
            tokio::time::timeout(Duration::from_millis(5), handle(req, delay)).await.ok()
        } else if i % 4 == 1 {
            tokio::time::timeout(Duration::from_secs(60), handle(req, delay)).await.ok()
        } else if i % 4 == 2 {
            tokio::spawn(handle(req, delay)).await.ok()
        } else {
            Some(handle(req, delay).await)
        };
        let took = start.elapsed().as_nanos();
        println!(
            "{{\"id\": {id}, \"path\": \"{path}\", \"weight\": {weight}, \"delay\": {delay}, \
             \"cancelled\": {cancel}, \"result\": {}, \"took_ns\": {took}}}",
            got.map_or("null".to_string(), |r| r.to_string())
        );
    }
}
