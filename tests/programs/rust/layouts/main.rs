//! A test target for noop's binary inspection.
//!
//! Types live in modules so that their DWARF names are namespaced
//! (`layouts::shapes::Inner`). They cover borrowed and owned strings, `Vec`,
//! `Option` with and without a niche, an enum with data (a DWARF variant
//! part), a C-like enum, tuples and a `#[repr(C)]` struct with holes.
//! Functions are never inlined and their results go through `black_box`, so
//! that each keeps its out-of-line copy and its parameters.
//!
//! Without arguments it exits at once; `layouts run` calls everything.

use std::hint::black_box;

pub mod shapes {
    /// A plain struct; rustc may reorder its fields.
    #[derive(Debug, Clone, Copy)]
    pub struct Inner {
        pub flag: bool,
        pub count: u64,
        pub small: u16,
        pub ratio: f32,
    }

    /// The C layout keeps declaration order, and with it the holes.
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    pub struct Header {
        pub tag: u8,
        pub length: u32,
        pub kind: u16,
        pub stamp: u64,
        pub last: u8,
    }

    /// Nests `Inner` and a tuple.
    #[derive(Debug)]
    pub struct Outer {
        pub inner: Inner,
        pub pair: (u8, i64),
        pub scale: f64,
        pub id: i32,
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    pub enum Color {
        Red,
        Green = 5,
        Blue,
    }

    /// An enum with data: DWARF describes it with a variant part.
    #[derive(Debug)]
    pub enum Event {
        Start,
        Click { x: i32, y: i32 },
        Key(char),
        Text(String),
    }
}

pub mod store {
    use super::shapes::{Color, Event, Inner, Outer};

    /// Owned and borrowed data, `Option`s with and without a niche.
    #[derive(Debug)]
    pub struct Record<'a> {
        pub name: &'a str,
        pub owner: String,
        pub values: Vec<u32>,
        pub limit: Option<u64>,
        pub parent: Option<&'a Outer>,
        pub color: Color,
        pub last: Event,
        pub cell: std::cell::Cell<i16>,
        pub boxed: Box<Inner>,
    }
}

use shapes::{Color, Event, Header, Inner, Outer};
use store::Record;

#[inline(never)]
fn add_ints(a: i64, b: i32, c: u8, d: u64, e: i16, f: usize, g: i64, h: i64) -> i64 {
    a + b as i64 + c as i64 + d as i64 + e as i64 + f as i64 + g + h
}

#[inline(never)]
fn mix_floats(x: f64, n: i32, y: f32) -> f64 {
    x * n as f64 + y as f64
}

#[inline(never)]
fn take_str(s: &str, t: &String, v: &Vec<u32>) -> usize {
    s.len() + t.len() + v.len()
}

#[inline(never)]
fn take_inner(i: Inner, h: &Header, o: Option<u64>) -> u64 {
    i.count + h.stamp + o.unwrap_or(1)
}

#[inline(never)]
fn take_header(h: Header) -> u64 {
    h.tag as u64 + h.length as u64 + h.kind as u64 + h.stamp + h.last as u64
}

#[inline(never)]
fn take_enum(e: &Event, c: Color) -> i32 {
    let base = match e {
        Event::Start => 0,
        Event::Click { x, y } => x + y,
        Event::Key(k) => *k as i32,
        Event::Text(t) => t.len() as i32,
    };
    base + c as i32
}

#[inline(never)]
fn take_record(r: &Record, parent: Option<&Outer>, pair: (u16, f64)) -> usize {
    r.name.len() + r.values.len() + parent.map_or(0, |p| p.id as usize) + pair.0 as usize
}

fn main() {
    if std::env::args().nth(1).as_deref() != Some("run") {
        return;
    }
    let inner = Inner { flag: true, count: 3, small: 4, ratio: 0.5 };
    let header = Header { tag: 1, length: 2, kind: 3, stamp: 4, last: 5 };
    let outer = Outer { inner, pair: (1, -2), scale: 1.5, id: 9 };
    let record = Record {
        name: "rec",
        owner: String::from("me"),
        values: vec![1, 2, 3],
        limit: Some(10),
        parent: Some(&outer),
        color: Color::Green,
        last: Event::Click { x: 1, y: 2 },
        cell: std::cell::Cell::new(-1),
        boxed: Box::new(inner),
    };
    let events = [Event::Start, Event::Key('k'), Event::Text(String::from("hi"))];
    let mut total = black_box(add_ints(1, 2, 3, 4, 5, 6, 7, 8));
    total += black_box(mix_floats(1.5, 2, 0.25)) as i64;
    total += black_box(take_str("abc", &record.owner, &record.values)) as i64;
    total += black_box(take_inner(inner, &header, record.limit)) as i64;
    total += black_box(take_header(header)) as i64;
    for e in events.iter().chain(std::iter::once(&record.last)) {
        total += black_box(take_enum(e, Color::Blue)) as i64;
    }
    total += black_box(take_record(&record, record.parent, (7, 0.5))) as i64;
    record.cell.set(total as i16);
    println!("{} {:?} {:?}", total, black_box(&record), Color::Red);
}
