//! The default test suite's fuzzing step: every target of `skiff_apiserver::fuzz` runs each
//! input of its corpus (`fuzz/corpus/<target>/`), then mutations of them (bit flips, byte
//! changes, insertions, deletions, repeats, splices, dictionary tokens, stacked) until its
//! time is up: `SKIFF_FUZZ_SECS` (3 seconds a target by default; `scripts/fuzz.sh` runs the
//! coverage-guided libFuzzer for longer). A panic fails the test, naming the input, which is
//! written beside the test's temporary files, and the seed that reproduces the run
//! (`SKIFF_FUZZ_SEED`); `SKIFF_FUZZ_REPLAY=FILE` runs such a file alone, uncaught, for its
//! backtrace.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use skiff_apiserver::fuzz::{FuzzTarget, target};

/// Tokens a mutation may insert: the punctuation and words of the formats the targets read.
const DICTIONARY: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"null",
    b"true",
    b"-1",
    b"1e999",
    b"0.5",
    b"\"apiVersion\"",
    b"\"kind\"",
    b"\"metadata\"",
    b"\"spec\"",
    b"\"containers\"",
    b"\"name\"",
    b"---\n",
    b"- ",
    b": ",
    b"\n  ",
    b"&a ",
    b"*a",
    b"!!binary ",
    b"\\u0000",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"\x00",
    b"%",
    b"=",
    b"!=",
    b" in (",
    b")",
    b"op",
    b"\"op\":\"add\"",
    b"\"path\":\"/spec/x\"",
    b"$patch",
    b"\"$retainKeys\"",
    b"k8s\x00",
    b"Bearer ",
    b"#",
    b"\"a,b\"",
    // SPDY/3.1: a control frame's version and types, FIN, a zlib stream's start
    b"\x80\x03\x00\x01",
    b"\x80\x03\x00\x03",
    b"\x80\x03\x00\x06",
    b"\x01\x00\x00\x00",
    b"\x78\xf9\xe3\xc6\xa7\xc2",
];

fn corpus_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(name)
}

fn corpus(name: &str) -> Vec<Vec<u8>> {
    let dir = corpus_dir(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect();
    assert!(!seeds.is_empty(), "{} holds no inputs", dir.display());
    seeds
}

fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    for _ in 0..rng.random_range(1..=6) {
        let len = input.len();
        match rng.random_range(0..8) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] = rng.random();
            }
            2 => {
                let i = rng.random_range(0..=len);
                input.insert(i, rng.random());
            }
            3 if len > 0 => {
                let from = rng.random_range(0..len);
                let to = (from + rng.random_range(1..=16)).min(len);
                input.drain(from..to);
            }
            4 if len > 0 => {
                // Repeat a slice: deep nesting, long runs.
                let from = rng.random_range(0..len);
                let to = (from + rng.random_range(1..=32)).min(len);
                let piece = input[from..to].to_vec();
                let times = rng.random_range(1..=64);
                for _ in 0..times {
                    input.splice(to..to, piece.iter().copied());
                }
            }
            5 => {
                let other = &seeds[rng.random_range(0..seeds.len())];
                if !other.is_empty() {
                    let from = rng.random_range(0..other.len());
                    let to = rng.random_range(from..=other.len());
                    let at = rng.random_range(0..=len);
                    input.splice(at..at, other[from..to].iter().copied());
                }
            }
            6 => {
                let token = DICTIONARY[rng.random_range(0..DICTIONARY.len())];
                let at = rng.random_range(0..=len);
                input.splice(at..at, token.iter().copied());
            }
            _ if len > 2 => {
                // The selector bytes: another content type, kind or message.
                let i = rng.random_range(0..2);
                input[i] = rng.random();
            }
            _ => input.push(rng.random()),
        }
    }
    input.truncate(64 * 1024);
}

/// Runs `t` on its corpus, then on mutations until its time is up.
fn fuzz(name: &str) {
    let t: FuzzTarget = target(name).unwrap_or_else(|| panic!("no fuzz target {name}"));
    // SKIFF_FUZZ_REPLAY=FILE runs one input of this target (a finding, named `<target>-…`)
    // uncaught, for its backtrace.
    if let Ok(file) = std::env::var("SKIFF_FUZZ_REPLAY") {
        let path = PathBuf::from(&file);
        if path
            .file_name()
            .is_some_and(|f| f.to_string_lossy().starts_with(name))
        {
            (t.run)(&std::fs::read(&path).unwrap_or_else(|e| panic!("{file}: {e}")));
        }
        return;
    }
    let seeds = corpus(name);
    let secs: f64 = std::env::var("SKIFF_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let seed: u64 = std::env::var("SKIFF_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    let mut rng = StdRng::seed_from_u64(seed);
    // Caught panics are reported below; the default hook would print every one.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    let run = |input: &[u8]| catch_unwind(AssertUnwindSafe(|| (t.run)(input)));
    let report = |input: &[u8], why: &str| -> ! {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-findings");
        std::fs::create_dir_all(&dir).expect("findings directory");
        let file = dir.join(format!("{name}-{seed}"));
        std::fs::write(&file, input).expect("write the finding");
        let message = format!(
            "fuzz target {name} panicked ({why}) on {} bytes written to {} \
             (SKIFF_FUZZ_SEED={seed}); the input starts {:?}",
            input.len(),
            file.display(),
            String::from_utf8_lossy(&input[..input.len().min(200)])
        );
        eprintln!("{message}");
        panic!("{message}");
    };
    let why = |e: Box<dyn std::any::Any + Send>| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    };
    for s in &seeds {
        if let Err(e) = run(s) {
            report(s, &why(e));
        }
    }
    let started = Instant::now();
    let budget = Duration::from_secs_f64(secs);
    let mut runs = 0u64;
    while started.elapsed() < budget {
        let mut input = seeds[rng.random_range(0..seeds.len())].clone();
        mutate(&mut rng, &mut input, &seeds);
        if let Err(e) = run(&input) {
            report(&input, &why(e));
        }
        runs += 1;
    }
    eprintln!(
        "fuzz {name}: {} corpus inputs, {runs} mutations in {:.1} s (SKIFF_FUZZ_SEED={seed})",
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn rest_body() {
    fuzz("rest_body");
}

#[test]
fn rest_patch() {
    fuzz("rest_patch");
}

#[test]
fn rest_request() {
    fuzz("rest_request");
}

#[test]
fn manifest() {
    fuzz("manifest");
}

#[test]
fn tokens() {
    fuzz("tokens");
}

#[test]
fn grpc() {
    fuzz("grpc");
}

#[test]
fn spdy() {
    fuzz("spdy");
}
