//! pdtp against vLLM's own code, release by release.
//!
//! `tools/vllm_golden.py` runs vLLM's connector code (extracted from each release's wheel)
//! over every pair and writes what happened to `tests/data/golden/`; `index.json` names the
//! file of each (connector, release). These tests resolve `connector@release` the way users
//! do and compare every vector: the exception class and message of the first failing rank,
//! else every rank's reads and releases, the release acks, and MoRIIO's functions over their
//! whole input grid. Where vLLM raises nothing but the pair cannot work (a rank dials a peer
//! rank that does not exist, or copies a block holding other heads), pdtp rejects it with its
//! own violation, and the test checks vLLM's recorded behaviour shows exactly that.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;

use flate2::read::GzDecoder;
use serde_json::Value;

use super::{
    moriio_bind_offset, moriio_dial_offset, nixl_handshake_peers, nixl_pp_check, resolve, RELEASES,
};
use crate::check::{connector_flow, load_ok, Flow, Shape, Violation, VllmError};
use crate::rules::{self, RuleError};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden")
}

fn load(name: &str) -> Value {
    let mut text = String::new();
    GzDecoder::new(File::open(golden_dir().join(name)).expect("golden file"))
        .read_to_string(&mut text)
        .expect("gzip");
    serde_json::from_str(&text).expect("json")
}

fn index() -> BTreeMap<String, BTreeMap<String, Option<String>>> {
    let text = std::fs::read_to_string(golden_dir().join("index.json")).expect("index.json");
    serde_json::from_str(&text).expect("index json")
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_i64().expect("int"))
        .collect()
}

/// Undo the run-length encoding (`[value, count, ...]`).
fn runs(v: &Value) -> Vec<i64> {
    let flat = ints(v);
    let mut out = Vec::new();
    for pair in flat.chunks(2) {
        out.extend(std::iter::repeat_n(pair[0], pair[1] as usize));
    }
    out
}

/// Fill a message template: `{i}` is argument i, `{{`/`}}` are literal braces.
fn fill(template: &str, args: &[i64]) -> String {
    let mut out = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let mut idx = String::new();
                for d in chars.by_ref() {
                    if d == '}' {
                        break;
                    }
                    idx.push(d);
                }
                out.push_str(&args[idx.parse::<usize>().expect("index")].to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

/// vLLM's sharding (`_rank_heads`): the head indices a rank holds (MLA: the latent).
fn vllm_heads(rank: i64, tp: i64, h: i64, mla: bool) -> Vec<i64> {
    if mla {
        return vec![0];
    }
    let (first, n) = rules::rank_heads(rank, tp, h);
    (first..first + n).collect()
}

#[derive(Default)]
struct Tally {
    vectors: u64,
    mismatches: Vec<String>,
}

impl Tally {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.vectors += 1;
        if !ok && self.mismatches.len() < 20 {
            self.mismatches.push(what());
        }
    }
}

/// pdtp's violation for a vLLM error recorded as (class, message).
fn same_error(v: &Violation, class: &str, message: &str) -> bool {
    if class == "NoSuchRank" {
        return v.error == VllmError::None && v.code == "unreachable_rank";
    }
    v.error.name() == class && v.message == message
}

/// A pair vLLM runs without an exception: pdtp's flow must match what vLLM did, or pdtp must
/// reject it for a reason the recorded behaviour shows.
fn compare_ok(
    connector: &str,
    (p, d, h, mla): (i64, i64, i64, bool),
    payload: &[Value],
    pdtp: &Result<Flow, Violation>,
) -> Result<(), String> {
    match connector {
        "nixl" => {
            let flow = pdtp.as_ref().map_err(|v| format!("pdtp rejects: {v:?}"))?;
            for (r, got) in payload.iter().enumerate() {
                let reads = ints(&got["reads"]);
                let mine: Vec<i64> = flow.decode[r].sources.iter().map(|s| s.0).collect();
                if mine != reads {
                    return Err(format!("rank {r}: vLLM reads {reads:?}, pdtp {mine:?}"));
                }
                let notified = ints(&got["handshake"]);
                if flow.decode[r].releases != notified {
                    return Err(format!(
                        "rank {r}: vLLM handshakes (notifies) {notified:?}, pdtp releases {:?}",
                        flow.decode[r].releases
                    ));
                }
            }
            Ok(())
        }
        "moriio" => {
            let read: Vec<i64> = payload
                .iter()
                .map(|x| x["read"].as_i64().unwrap())
                .collect();
            let wrong = (0..d)
                .find(|&r| vllm_heads(read[r as usize], p, h, mla) != vllm_heads(r, d, h, mla));
            // Prefill ranks no decode rank releases (vLLM's recorded releases).
            let mut freed = vec![false; p as usize];
            for got in payload {
                for q in ints(&got["release"]) {
                    freed[q as usize] = true;
                }
            }
            let unreleased = freed.iter().any(|f| !f);
            match (pdtp, wrong) {
                (Err(v), Some(_)) if v.code == "kv_heads_misrouted" => Ok(()),
                // Before 0.23.0 nothing reaps them (no deferred-send timeout: the scheduler
                // code, not these per-rank vectors; tests/test_rules.py names the lines).
                (Err(v), None) if v.code == "unreleased_prefill_blocks" && unreleased => Ok(()),
                (Err(v), _) => Err(format!("pdtp rejects what works: {v:?}")),
                (Ok(_), Some(r)) => Err(format!(
                    "decode rank {r} copies prefill rank {} holding other heads, pdtp accepts",
                    read[r as usize]
                )),
                (Ok(flow), None) => {
                    for (r, got) in payload.iter().enumerate() {
                        let dial = got["dial"].as_i64().unwrap();
                        let release = ints(&got["release"]);
                        let f = &flow.decode[r];
                        if f.sources.len() != 1
                            || f.sources[0].0 != read[r]
                            || dial != read[r]
                            || f.releases != release
                        {
                            return Err(format!(
                                "rank {r}: vLLM dials {dial}, reads {}, releases {release:?}; \
                                 pdtp {f:?}",
                                read[r]
                            ));
                        }
                    }
                    Ok(())
                }
            }
        }
        "moriio-write" => {
            if payload[0].get("targets").is_some() {
                let flow = pdtp.as_ref().map_err(|v| format!("pdtp rejects: {v:?}"))?;
                let mut want: Vec<Vec<(i64, Vec<i64>)>> = vec![Vec::new(); d as usize];
                for (q, got) in payload.iter().enumerate() {
                    for t in got["targets"].as_array().unwrap() {
                        let t = ints(t);
                        let (rank, remote_head, n) = (t[0], t[1], t[2]);
                        if n == 0 {
                            continue;
                        }
                        let first = vllm_heads(rank, d, h, mla)[0];
                        let heads = if mla {
                            vec![0]
                        } else {
                            (first + remote_head..first + remote_head + n).collect()
                        };
                        want[rank as usize].push((q as i64, heads));
                    }
                }
                for (r, w) in want.iter().enumerate() {
                    if flow.decode[r].sources != *w {
                        return Err(format!(
                            "decode rank {r}: vLLM writes {w:?}, pdtp {:?}",
                            flow.decode[r].sources
                        ));
                    }
                }
                return Ok(());
            }
            // Before the write mapping: producer q sends its block whole to `data` and
            // write_done to `notify`. It works only if every decode rank gets both, from one
            // producer holding its heads.
            let mut fed = vec![0; d as usize];
            let mut works = true;
            for (q, got) in payload.iter().enumerate() {
                let (data, notify) = (ints(&got["data"]), ints(&got["notify"]));
                if data != notify || data.len() != 1 || !(0..d).contains(&data[0]) {
                    works = false;
                    continue;
                }
                fed[data[0] as usize] += 1;
                if vllm_heads(q as i64, p, h, mla) != vllm_heads(data[0], d, h, mla) {
                    works = false;
                }
            }
            works &= fed.iter().all(|&n| n == 1);
            // One decode rank, replicated KV (one head, or MLA): every producer dials decode
            // rank 0, whose scheduler notifies only prefill rank 0 (`remote_tp_rank(0, 1, P)`
            // = 0, the recorded `notify` of producer 0), which writes all of it; the others'
            // write tasks expire (0.25.0 `moriio_engine.py:227`). pdtp: valid, ranks idle.
            let rank0_writes = d == 1
                && p > 1
                && (h == 1 || mla)
                && payload.iter().all(|got| ints(&got["data"]) == [0])
                && ints(&payload[0]["notify"]) == [0];
            match (pdtp, works) {
                (Ok(_), true) => Ok(()),
                (Ok(f), false) if rank0_writes && f.idle_prefill == (1..p).collect::<Vec<_>>() => {
                    Ok(())
                }
                (Err(v), false) if v.error == VllmError::None => Ok(()),
                (got, _) => Err(format!("vLLM's writes work: {works}; pdtp {got:?}")),
            }
        }
        other => Err(format!("unknown connector {other}")),
    }
}

fn compare_pairs(connector: &str, release: &str, data: &Value, tally: &mut Tally) {
    let profile = resolve(&format!("{connector}@{release}"))
        .expect("a golden release resolves")
        .profile;
    let max_tp = data["max_tp"].as_i64().unwrap();
    let errors = data["errors"].as_array().unwrap();
    let maps = data["maps"].as_array().unwrap();
    for (key, mla) in [("0", false), ("1", true)] {
        let codes = runs(&data["pairs"][key]);
        let mut i = 0;
        for h in ints(&data["heads"][key]) {
            let shape = Shape {
                num_attention_heads: 1,
                num_kv_heads: h,
                is_mla: mla,
                hybrid: false,
            };
            for p in 1..=max_tp {
                for d in 1..=max_tp {
                    let code = codes[i];
                    i += 1;
                    let loads = load_ok(
                        &Shape {
                            num_attention_heads: p * d,
                            ..shape
                        },
                        p,
                    ) && load_ok(
                        &Shape {
                            num_attention_heads: p * d,
                            ..shape
                        },
                        d,
                    );
                    if code < 0 {
                        tally.check(!loads, || format!("P{p} D{d} H{h}: loads in pdtp only"));
                        continue;
                    }
                    let flow = connector_flow(&shape, p, d, profile);
                    let what =
                        |m: String| format!("{connector}@{release} P{p} D{d} H{h} mla={mla}: {m}");
                    if code % 2 == 0 {
                        let e = &errors[(code / 2) as usize];
                        let class = e[0].as_str().unwrap();
                        let message = fill(e[1].as_str().unwrap(), &[p, d, h]);
                        tally.check(
                            matches!(&flow, Err(v) if same_error(v, class, &message)),
                            || what(format!("vLLM {class}({message:?}), pdtp {flow:?}")),
                        );
                    } else {
                        let payload = maps[(code / 2) as usize].as_array().unwrap();
                        let r = compare_ok(connector, (p, d, h, mla), payload, &flow);
                        tally.check(r.is_ok(), || what(r.unwrap_err()));
                    }
                }
            }
        }
        assert_eq!(i, codes.len(), "grid size");
    }
    if let Some(acks) = data.get("acks") {
        let values = acks["values"].as_array().unwrap();
        let codes = runs(&acks["pd"]);
        let shape = Shape {
            num_attention_heads: 1,
            num_kv_heads: 1,
            is_mla: true,
            hybrid: false,
        };
        for p in 1..=max_tp {
            for d in 1..=max_tp {
                let v = &values[codes[((p - 1) * max_tp + d - 1) as usize] as usize];
                if let Ok(flow) = connector_flow(&shape, p, d, profile) {
                    let want = if v[0] == "ok" {
                        v[1].as_i64().unwrap_or(1)
                    } else {
                        -1
                    };
                    tally.check(flow.expected_acks == want, || {
                        format!(
                            "{connector}@{release} acks P{p} D{d}: vLLM {v}, pdtp {}",
                            flow.expected_acks
                        )
                    });
                }
            }
        }
    }
}

fn outcome<T: Into<Value>>(r: Result<T, RuleError>, args: &[i64]) -> (String, Value) {
    match r {
        Ok(v) => ("ok".into(), v.into()),
        Err(e) => {
            let class = match e {
                RuleError::Value(_) => "ValueError",
                RuleError::NotImplemented(_) => "NotImplementedError",
                RuleError::Assertion(_) => "AssertionError",
            };
            let _ = args;
            (class.into(), Value::String(e.message().to_string()))
        }
    }
}

fn compare_functions(data: &Value, tally: &mut Tally) {
    let Some(functions) = data.get("functions") else {
        return;
    };
    let lo = data["func_lo"].as_i64().unwrap();
    let max_tp = data["max_tp"].as_i64().unwrap();
    let max_heads = data["max_heads"].as_i64().unwrap();
    let sizes: Vec<i64> = (lo..=max_tp).collect();
    for (name, grid) in functions.as_object().unwrap() {
        let values = grid["values"].as_array().unwrap();
        let codes = runs(&grid["codes"]);
        let mut args: Vec<Vec<i64>> = Vec::new();
        match name.as_str() {
            "get_moriio_remote_tp_rank" => {
                for &l in &sizes {
                    for &r in &sizes {
                        for rank in -1..=l.max(0) {
                            args.push(vec![rank, l, r]);
                        }
                    }
                }
            }
            "get_moriio_expected_ack_count" => {
                for &a in &sizes {
                    for &b in &sizes {
                        args.push(vec![a, b]);
                    }
                }
            }
            _ => {
                for mla in [0, 1] {
                    for h in -1..=max_heads {
                        for &a in &sizes {
                            for &b in &sizes {
                                args.push(vec![a, b, h, mla]);
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(args.len(), codes.len(), "{name} grid");
        for (a, &code) in args.iter().zip(&codes) {
            let want = &values[code as usize];
            let (class, value) = match name.as_str() {
                "get_moriio_remote_tp_rank" => outcome(rules::remote_tp_rank(a[0], a[1], a[2]), a),
                "get_moriio_expected_ack_count" => {
                    outcome(rules::expected_ack_count(a[0], a[1]), a)
                }
                "validate_moriio_heterogeneous_tp_kv_heads" => outcome(
                    rules::validate_kv_heads(a[0], a[1], a[2], a[3] == 1).map(|_| Value::Null),
                    a,
                ),
                "validate_write_tp_topology" => outcome(
                    rules::validate_write_tp_topology(a[0], a[1], a[2], a[3] == 1)
                        .map(|_| Value::Null),
                    a,
                ),
                other => panic!("golden has {other}, pdtp has no counterpart"),
            };
            let want_value = if want[0] == "ok" {
                want[1].clone()
            } else {
                Value::String(fill(want[1].as_str().unwrap(), &a[..a.len().min(3)]))
            };
            tally.check(want[0] == class && want_value == value, || {
                format!("{name}{a:?}: vLLM {want}, pdtp {class} {value}")
            });
        }
    }
}

/// Every (connector, release) in the index, every vector, zero disagreements. Prints the
/// number of vectors per golden file (`cargo test golden -- --nocapture`).
#[test]
fn pdtp_agrees_with_vllm_on_every_golden_vector() {
    let index = index();
    let mut failures = Vec::new();
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for (connector, releases) in &index {
        if connector == LAYOUT {
            continue; // not a connector: `pdtp_agrees_with_vllm_on_parallel_connector_facts`
        }
        let mut by_file: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (release, file) in releases {
            if let Some(f) = file {
                by_file.entry(f).or_default().push(release);
            } else {
                // A connector vLLM did not ship in that release: pdtp must refuse it.
                assert!(
                    resolve(&format!("{connector}@{release}")).is_err(),
                    "{connector}@{release} resolves but vLLM {release} has no such connector"
                );
            }
        }
        for (file, rels) in by_file {
            let data = load(file);
            // Releases sharing a golden file and a pdtp row give identical comparisons:
            // each (file, row) is compared once and counted for every release.
            let mut done: Vec<(*const super::ConnectorProfile, u64, usize)> = Vec::new();
            let mut functions: Option<(u64, usize)> = None;
            for release in rels {
                let row: *const super::ConnectorProfile =
                    resolve(&format!("{connector}@{release}"))
                        .expect("a golden release resolves")
                        .profile;
                let (pairs, bad) = match done.iter().find(|(r, _, _)| *r == row) {
                    Some(&(_, n, bad)) => (n, bad),
                    None => {
                        let mut tally = Tally::default();
                        compare_pairs(connector, release, &data, &mut tally);
                        let out = (tally.vectors, tally.mismatches.len());
                        failures.extend(tally.mismatches);
                        done.push((row, out.0, out.1));
                        out
                    }
                };
                let (funcs, fbad) = *functions.get_or_insert_with(|| {
                    let mut tally = Tally::default();
                    compare_functions(&data, &mut tally);
                    let out = (tally.vectors, tally.mismatches.len());
                    failures.extend(tally.mismatches);
                    out
                });
                println!(
                    "golden {connector}@{release} ({file}): {} vectors, {} disagreements",
                    pairs + funcs,
                    bad + fbad
                );
                *seen.entry(connector.clone()).or_default() += pairs + funcs;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
    for connector in ["nixl", "moriio", "moriio-write"] {
        assert!(
            seen.get(connector).copied().unwrap_or(0) > 10_000,
            "{connector}: {seen:?}"
        );
    }
}

/// The index covers exactly the releases pdtp lists, for every connector with rows.
#[test]
fn golden_covers_every_listed_release() {
    let index = index();
    for connector in ["nixl", "moriio", "moriio-write", LAYOUT] {
        let releases: Vec<&str> = index[connector].keys().map(String::as_str).collect();
        let mut want: Vec<&str> = RELEASES.to_vec();
        want.sort();
        let mut got = releases.clone();
        got.sort();
        assert_eq!(got, want, "{connector}");
    }
}

/// The golden index's part holding the layout rules of every release (not a connector).
const LAYOUT: &str = "layout";

/// One `function_grid` of a layout file: the recorded outcome of each vector, in grid order.
fn grid_outcomes<'a>(data: &'a Value, name: &str) -> Option<Vec<&'a Value>> {
    let grid = data.get(name)?;
    let values = grid["values"].as_array().expect("values");
    Some(
        runs(&grid["codes"])
            .into_iter()
            .map(|c| &values[c as usize])
            .collect(),
    )
}

/// vLLM's recorded outcome as pdtp's `Result` shape: ("ok", value) or (class, message).
fn recorded(want: &Value, args: &[i64]) -> (String, Value) {
    let class = want[0].as_str().expect("class").to_string();
    if class == "ok" {
        return (class, want[1].clone());
    }
    (
        class,
        Value::String(fill(want[1].as_str().expect("message"), args)),
    )
}

fn rule_outcome(r: Result<Value, RuleError>) -> (String, Value) {
    outcome(r, &[])
}

/// The connector facts of parallel layouts in one release's layout file, against the rows
/// pdtp resolves for that release: MoRIIO's bound and dialed port offsets per DP rank (READ
/// and WRITE rows), NIXL's pipeline check per `kv_role` and the stages its handshake queries.
fn compare_parallel_facts(release: &str, data: &Value, tally: &mut Tally) {
    let max = data["moriio_max"].as_i64().expect("moriio_max");
    match grid_outcomes(data, "moriio_bind") {
        Some(got) => {
            let args: Vec<[i64; 2]> = (0..max)
                .flat_map(|d| (0..max).map(move |t| [d, t]))
                .collect();
            assert_eq!(args.len(), got.len(), "moriio_bind grid");
            for (a, want) in args.iter().zip(got) {
                let mine = (
                    "ok".to_string(),
                    Value::from(moriio_bind_offset(a[0], a[1])),
                );
                tally.check(recorded(want, a) == mine, || {
                    format!("moriio_bind{a:?}@{release}: vLLM {want}, pdtp {mine:?}")
                });
            }
        }
        None => assert!(resolve(&format!("moriio@{release}")).is_err(), "{release}"),
    }
    if let Some(got) = grid_outcomes(data, "moriio_dial") {
        let mut args: Vec<[i64; 4]> = Vec::new();
        for k in 0..max {
            for lt in 1..=max {
                for r in 0..lt {
                    for rt in 1..=max {
                        args.push([k, lt, r, rt]);
                    }
                }
            }
        }
        assert_eq!(args.len(), got.len(), "moriio_dial grid");
        // vLLM's driver dials from a decode (READ) worker; the WRITE rows must dial alike.
        for name in ["moriio", "moriio-write"] {
            let row = resolve(&format!("{name}@{release}")).expect("moriio in this release");
            let (dial, dp_dial) = row.profile.rules.moriio_dials().expect("a MoRIIO row");
            for (a, want) in args.iter().zip(&got) {
                let mine = rule_outcome(
                    moriio_dial_offset(dial, dp_dial, a[0], a[1], a[2], a[3]).map(Value::from),
                );
                tally.check(recorded(want, a) == mine, || {
                    format!("moriio_dial{a:?} {name}@{release}: vLLM {want}, pdtp {mine:?}")
                });
            }
        }
    }
    let pp = resolve(&format!("nixl@{release}"))
        .expect("nixl in every release")
        .profile
        .rules
        .nixl_pp()
        .expect("a NIXL row");
    let roles: Vec<String> = data["nixl_roles"]
        .as_array()
        .expect("roles")
        .iter()
        .map(|r| r.as_str().expect("role").to_string())
        .collect();
    let sizes = ints(&data["nixl_pp_sizes"]);
    let got = grid_outcomes(data, "nixl_pp_init").expect("nixl_pp_init");
    let args: Vec<(&String, i64)> = roles
        .iter()
        .flat_map(|r| sizes.iter().map(move |&s| (r, s)))
        .collect();
    assert_eq!(args.len(), got.len(), "nixl_pp_init grid");
    for ((role, size), want) in args.iter().zip(got) {
        let mine = rule_outcome(nixl_pp_check(pp, role, *size).map(|()| Value::Null));
        tally.check(recorded(want, &[]) == mine, || {
            format!("nixl_pp_init({role}, {size})@{release}: vLLM {want}, pdtp {mine:?}")
        });
    }
    let got = grid_outcomes(data, "nixl_handshake").expect("nixl_handshake");
    let mut args: Vec<[i64; 3]> = Vec::new();
    for tp in ints(&data["nixl_pp_tp"]) {
        for r in 0..tp {
            for &s in &sizes {
                args.push([tp, r, s]);
            }
        }
    }
    assert_eq!(args.len(), got.len(), "nixl_handshake grid");
    for (a, want) in args.iter().zip(got) {
        assert_eq!(want[0], "ok", "the handshake driver records no errors");
        // vLLM 0.11.0 names the rank by the port (`base + tp_rank`), not in the message: the
        // driver records `[0, null]`, which is the same peer as `[0, tp_rank]`.
        let want: Value = match &want[1] {
            Value::Array(peers) => peers
                .iter()
                .map(|p| match p[1] {
                    Value::Null => Value::from(vec![p[0].clone(), Value::from(a[1])]),
                    _ => p.clone(),
                })
                .collect(),
            other => other.clone(),
        };
        let mine: Value = match nixl_handshake_peers(pp, a[1], a[2]) {
            None => Value::Null,
            Some(peers) => peers
                .iter()
                .map(|&(s, t)| Value::from(vec![s, t]))
                .collect(),
        };
        tally.check(want == mine, || {
            format!("nixl_handshake{a:?}@{release}: vLLM {want}, pdtp {mine}")
        });
    }
}

/// Every release's layout golden file, the connector facts of DP and PP, zero disagreements.
/// The other layout rules in these files (`pp_indices`, `expert_map`, `moe_parallel`,
/// `config_check`) are compared where pdtp states them (the layout rules module).
#[test]
fn pdtp_agrees_with_vllm_on_parallel_connector_facts() {
    let index = index();
    let mut failures = Vec::new();
    let mut total = 0;
    for (release, file) in &index[LAYOUT] {
        let data = load(file.as_deref().expect("every release has layout rules"));
        assert_eq!(data["part"], LAYOUT);
        let mut tally = Tally::default();
        compare_parallel_facts(release, &data, &mut tally);
        println!(
            "golden layout@{release} ({}): {} connector-fact vectors, {} disagreements",
            file.as_deref().unwrap_or(""),
            tally.vectors,
            tally.mismatches.len()
        );
        total += tally.vectors;
        failures.extend(tally.mismatches);
    }
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total > 50_000, "{total}");
}

#[test]
fn fill_templates() {
    assert_eq!(fill("a {0} b {1}{{x}}", &[4, 8]), "a 4 b 8{x}");
}
