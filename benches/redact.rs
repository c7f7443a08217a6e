//! Log redaction benchmark: what [`Redactor::redact`] costs for one JSON log line as the number
//! of live secrets (the caller tokens of live Skill API sessions) grows, with the daemon's kind
//! of configured secrets (two platform tokens) beside them.
//!
//! Every line the daemon logs goes through the redactor (`observability::redact`), so its cost
//! is paid once per Skill API call (the `skill_call` audit line) and per event anywhere else.
//! Cases: a `skill_call` line with nothing to replace (the usual line), and the same line
//! carrying one live token and a bearer header (a line that must be rewritten), each with 0,
//! 16, 256 and 2 500 live secrets.
//!
//! Run: `cargo bench --bench redact`. Results are recorded in `docs/PERFORMANCE.md` ("Log
//! redaction"), earlier runs in `docs/performance/skill-api.md` ("The daemon's log line, and
//! fewer copies per call").

use std::hint::black_box;

use air_friends::observability::Redactor;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// Live secrets per case.
const LIVE: [usize; 4] = [0, 16, 256, 2_500];

/// A `skill_call` line as the daemon's JSON log writes it.
const CLEAN_LINE: &str = r#"{"timestamp":"2026-12-03T02:10:11.123456Z","level":"INFO","message":"skill_call","session_id":"9f86d081884c7d659a2feaa0c55ad015","skill":"fetch-context","user":"100000000000000001","platform":"discord","outcome":"ok","code":"OK","status":200,"duration_ms":0,"dedup":"miss","body_bytes":96,"terminate":false,"target":"air_friends::skill_api::server","span":{"channel":"200000000000000002","platform":"discord","session_id":"9f86d081884c7d659a2feaa0c55ad015","skill":"fetch-context","name":"skill"}}"#;

fn token(i: usize) -> String {
    format!("{i:064x}")
}

fn redact(c: &mut Criterion) {
    let mut group = c.benchmark_group("redact");
    for live in LIVE {
        let redactor = Redactor::new([
            "bench-discord-token-0123456789".to_owned(),
            "bench-misskey-token-0123456789".to_owned(),
        ]);
        let secrets = redactor.live_secrets();
        for i in 0..live {
            secrets.insert(&token(i));
        }
        let dirty = format!(
            "{} error=\"upstream said: Bearer abc.def-123 for {}\"",
            CLEAN_LINE,
            token(live / 2)
        );
        group.bench_with_input(BenchmarkId::new("clean_line", live), &live, |b, _| {
            b.iter(|| redactor.redact(black_box(CLEAN_LINE)));
        });
        group.bench_with_input(BenchmarkId::new("dirty_line", live), &live, |b, _| {
            b.iter(|| redactor.redact(black_box(&dirty)));
        });
    }
    group.finish();
}

criterion_group!(benches, redact);
criterion_main!(benches);
