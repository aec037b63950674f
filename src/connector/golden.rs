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
    release: &str,
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
                // The per-rank vectors show prefill ranks no decode rank releases; whether
                // their blocks are ever freed is the scheduler's (the deferred-send reaper):
                // the release's flow data says (`pdtp_agrees_with_vllm_moriio_flow`).
                (Err(v), None)
                    if v.code == "unreleased_prefill_blocks"
                        && unreleased
                        && flow_never_reaps(release) =>
                {
                    Ok(())
                }
                // The per-rank vectors cannot see the ack path: the flow shows the prefill
                // refusing every release (0.18.0-0.22.1).
                (Err(v), None)
                    if v.code == "release_acks_rejected" && flow_rejects_releases(release) =>
                {
                    Ok(())
                }
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
            // The per-rank vectors cannot see who is notified and whose tasks expire: where
            // they show the writes failing and pdtp says vLLM serves the pair, the release's
            // WRITE flow data must show it served, with pdtp's sources and idle ranks.
            match (pdtp, works) {
                (Ok(_), true) => Ok(()),
                // 0.20.0-0.22.1: the per-rank vectors cannot see the decode scheduler's block
                // notices; the release's WRITE flow data must show every vector hang.
                (Err(v), true)
                    if v.code == "write_notices_to_self"
                        && flow_write_kinds(release, |_| true) == ["hang"] =>
                {
                    Ok(())
                }
                (Ok(f), false) => match flow_write_served(release, p, d, h, mla) {
                    Some((sources, expired))
                        if expired == f.idle_prefill
                            && sources.iter().zip(&f.decode).all(|(s, fd)| {
                                let mut mine = fd.sources.clone();
                                mine.sort();
                                *s == mine
                            }) =>
                    {
                        Ok(())
                    }
                    got => Err(format!(
                        "the per-rank writes fail; pdtp serves {f:?}; the WRITE flow: {got:?}"
                    )),
                },
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
                sliding_window: false,
                mamba_groups: None,
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
                        // MoRIIO WRITE 0.25.0-0.32.0 raises the dial's ValueError in a
                        // handshake future that only logs it: pdtp names it and says the
                        // requests hang, which the release's WRITE flow data must show.
                        let logged = connector == "moriio-write"
                            && matches!(&flow, Err(v) if v.code == "tp_not_divisible"
                                && v.error == VllmError::None
                                && v.consequence == crate::check::consequence::HANG
                                && v.message.starts_with(&message))
                            && flow_write_kinds(release, |v| v.p % v.d != 0 && v.d % v.p != 0)
                                == ["hang"];
                        tally.check(
                            logged || matches!(&flow, Err(v) if same_error(v, class, &message)),
                            || what(format!("vLLM {class}({message:?}), pdtp {flow:?}")),
                        );
                    } else {
                        let payload = maps[(code / 2) as usize].as_array().unwrap();
                        let r = compare_ok(connector, release, (p, d, h, mla), payload, &flow);
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
            sliding_window: false,
            mamba_groups: None,
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
        if connector == LAYOUT || connector.starts_with("flow-") {
            // Not a connector's rule vectors: `pdtp_agrees_with_vllm_on_parallel_connector_facts`
            // and `pdtp_agrees_with_vllm_moriio_flow`.
            continue;
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
    for connector in ["nixl", "moriio", "moriio-write", LAYOUT, "flow-moriio"] {
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

// ------------------------------------------------------------------ the connector's flow
//
// `tools/vllm_flow.py` runs each release's MoRIIO modules whole (workers built by their own
// `__init__`, `start_load_kv`, `get_finished`, the producer's ack counting and the
// scheduler's deferred-send reaper) over a grid of TP, DP, head and MLA layouts, and records
// what happens to each request: the verdict (the exception that reaches the user and when),
// per decode rank the prefill (DP, TP) rank whose memory it read and the ranks it notified,
// per prefill rank the acks received and whether it reported the request sent, and whether
// the request's prefill blocks were freed by acks, by the timeout, or never.

/// The prefill engine id the flow driver's decode ranks see (`host:handshake_port`), which
/// vLLM's texts quote; pdtp's texts name it `{remote_engine_id}`.
const FLOW_ENGINE: &str = "10.0.0.1:6301";

struct FlowVector {
    p: i64,
    d: i64,
    h: i64,
    mla: bool,
    pdp: i64,
    ddp: i64,
    backend: String,
    /// Pipeline stages of each side.
    ppp: i64,
    dpp: i64,
    /// `""`, `"mamba"` (Mamba-2 layers beside attention) or `"sliding"` (sliding-window
    /// attention layers beside full attention).
    hybrid: String,
    /// The model's attention heads pdtp's check is given: no MoRIIO module reads them
    /// (`tools/vllm_flow.py`: the driver's model config has no such field), so every count
    /// that loads both sides is vLLM's one outcome. [`FlowVector::attention_counts`].
    a: i64,
}

impl FlowVector {
    fn parse(a: &[Value]) -> FlowVector {
        let v = FlowVector {
            p: a[1].as_i64().unwrap(),
            d: a[2].as_i64().unwrap(),
            h: a[3].as_i64().unwrap(),
            mla: a[4].as_bool().unwrap(),
            pdp: a[5].as_i64().unwrap(),
            ddp: a[6].as_i64().unwrap(),
            backend: a[7].as_str().unwrap().to_string(),
            ppp: a.get(8).map_or(1, |x| x.as_i64().unwrap()),
            dpp: a.get(9).map_or(1, |x| x.as_i64().unwrap()),
            hybrid: a.get(10).map_or("", |x| x.as_str().unwrap()).to_string(),
            a: 0,
        };
        FlowVector {
            a: v.attention_counts()[0],
            ..v
        }
    }

    /// The attention-head counts each vector is checked at: the smallest that both TP sizes
    /// and the KV heads divide (MHA where that is the KV heads, H) and three times it (3H):
    /// the grid's TP sizes 1..64 include sizes (5, 7, 11, ...) no one count divides.
    fn attention_counts(&self) -> [i64; 2] {
        fn gcd(a: i64, b: i64) -> i64 {
            if b == 0 {
                a
            } else {
                gcd(b, a % b)
            }
        }
        let lcm = |a: i64, b: i64| a / gcd(a, b) * b;
        let a = lcm(lcm(self.p, self.d), self.h);
        [a, 3 * a]
    }
}

/// How a vector's recorded verdict compares before its requests are looked at: `Some(r)` is
/// the answer (an engine start that fails or hangs, one that succeeds where the driver runs
/// no request), `None` when the requests decide.
fn compare_start(
    verdict: &[Value],
    report: &crate::check::PairReport,
) -> Option<Result<(), String>> {
    use crate::check::{consequence, Stage};
    let first = report.violations.first();
    match verdict[0].as_str().unwrap() {
        "engine_start" if verdict[1] == "hang" => {
            // Two ranks of one side bind one port: the second's listener never binds and the
            // engine start waits for it forever.
            let side = verdict[2].as_str().unwrap();
            Some(match first {
                Some(x)
                    if x.consequence == consequence::HANG
                        && x.when == Stage::EngineStart
                        && x.side == side =>
                {
                    Ok(())
                }
                other => Err(format!(
                    "vLLM: {side} ports {:?} collide, the engine start hangs; pdtp {other:?}",
                    verdict[3]
                )),
            })
        }
        "engine_start" => {
            let class = verdict[1].as_str().unwrap();
            let message = &flow_mamba_text(verdict[2].as_str().unwrap());
            Some(match first {
                Some(x)
                    if x.when == Stage::EngineStart
                        && x.user_error().0.name() == class
                        && x.user_error().1 == message =>
                {
                    Ok(())
                }
                other => Err(format!(
                    "vLLM raises {class}({message:?}) at the engine start; pdtp {other:?}"
                )),
            })
        }
        _ => None,
    }
}

/// The flow driver's Mamba layer (`tools/vllm_flow.py`: `LAYER_2`) and the `[B, H, N, C]` view
/// vLLM 0.30.0's allocator gives it (`NUM_BLOCKS` blocks, one head, one state,
/// `MAMBA_STATE_BYTES`), as a recorded text quotes them; pdtp's texts name them
/// `{mamba_layer}`, `{num_blocks}` and `{mamba_state_bytes}`.
const FLOW_MAMBA_VIEW: (&str, &str) = (
    "model.layers.1.mixer: (64, 1, 1, 71680)",
    "{mamba_layer}: ({num_blocks}, 1, 1, {mamba_state_bytes})",
);

fn flow_mamba_text(message: &str) -> String {
    message.replace(FLOW_MAMBA_VIEW.0, FLOW_MAMBA_VIEW.1)
}

/// What pdtp says of one flow vector: the pair's report and, for a TP-only layout, the flow.
fn pdtp_flow_report(
    v: &FlowVector,
    profile: &super::ConnectorProfile,
) -> (crate::check::PairReport, Result<Flow, Violation>) {
    let shape = Shape {
        num_attention_heads: v.a,
        num_kv_heads: v.h,
        is_mla: v.mla,
        hybrid: v.hybrid == "mamba",
        sliding_window: v.hybrid == "sliding",
        mamba_groups: None,
    };
    let flow = connector_flow(&shape, v.p, v.d, profile);
    let report = grid_report(shape, (v.p, v.ppp, v.pdp), (v.d, v.dpp, v.ddp), profile);
    (report, flow)
}

/// pdtp's report of a flow grid vector's pair: `(tp, pp, dp)` per side, TP-only layouts
/// through `check_pair`, the others through the layout rules (a 64-layer dense model that
/// supports PP, as the flow drivers build it). Shared by the MoRIIO and NIXL flow tests.
pub(super) fn grid_report(
    shape: Shape,
    (p, ppp, pdp): (i64, i64, i64),
    (d, dpp, ddp): (i64, i64, i64),
    profile: &super::ConnectorProfile,
) -> crate::check::PairReport {
    use crate::layout::Layout;
    use crate::layout_rules::{pair_report, LayoutModel};
    if pdp == 1 && ddp == 1 && ppp == 1 && dpp == 1 {
        return crate::check::check_pair(&shape, p, d, profile, None);
    }
    let m = LayoutModel {
        shape,
        num_layers: 64,
        num_experts: 0,
        supports_pp: true,
        output_groups: 0,
    };
    let lay = |tp, pp, dp| Layout {
        tp,
        pp,
        dp,
        ep: false,
    };
    pair_report(&m, &lay(p, ppp, pdp), &lay(d, dpp, ddp), profile, None)
}

/// A vector vLLM refuses or hangs on (READ or WRITE): its class, text and moment against
/// pdtp's first violation; `None` where vLLM raises nothing and the requests decide.
/// `engines`: the recorded engine ids that vLLM's text names, each `{remote_engine_id}` in
/// pdtp's template.
fn compare_refusal(
    v: &FlowVector,
    verdict: &[Value],
    report: &crate::check::PairReport,
    engines: &[&str],
) -> Option<Result<(), String>> {
    use crate::check::consequence;
    let kind = verdict[0].as_str().unwrap();
    if kind == "ok" {
        return None;
    }
    let class = verdict[1].as_str().unwrap();
    let Some(first) = report.violations.first() else {
        return Some(Err(format!("vLLM {verdict:?}; pdtp accepts")));
    };
    if class == "hang" {
        // A handshake dials a port no prefill rank bound: it waits forever.
        return Some(
            if first.error == VllmError::None && first.consequence == consequence::HANG {
                Ok(())
            } else {
                Err(format!("vLLM hangs in the {kind}; pdtp {first:?}"))
            },
        );
    }
    let mut message = fill(verdict[2].as_str().unwrap(), &[v.p, v.d, v.h]);
    for engine in engines {
        message = message.replace(engine, "{remote_engine_id}");
    }
    let (e, m) = first.user_error();
    Some(
        if e.name() == class && m == message && first.when.name() == kind {
            Ok(())
        } else {
            Err(format!(
                "vLLM {class}({message:?}) at {kind}; pdtp {}({m:?}) at {}",
                e.name(),
                first.when.name()
            ))
        },
    )
}

/// The flow driver's sliding-window request (`tools/vllm_flow.py`: `WINDOW_BLOCKS` blocks in
/// each KV-cache group, `SLIDING_WINDOW` tokens of window, `BLOCK_SIZE`-token blocks).
const FLOW_WINDOW: (i64, i64, i64) = (4096, 16, 300);

/// A sliding-window READ vector's block windows (per KV-cache group: local and remote
/// blocks moved, each the last of its side's blocks) against `rule`, the transfer map's
/// `sliding_window_blocks`.
fn compare_windows(windows: &Value, rule: super::SlidingBlocks) -> Result<(), String> {
    let (window, block, blocks) = FLOW_WINDOW;
    let groups = windows.as_array().expect("windows");
    let mut want = vec![blocks];
    if rule.groups() == 2 {
        want.push(rule.blocks(window, block, blocks));
    }
    let got: Vec<(i64, i64, bool)> = groups
        .iter()
        .map(|g| {
            (
                g[0].as_i64().unwrap(),
                g[1].as_i64().unwrap(),
                g[2].as_bool().unwrap() && g[3].as_bool().unwrap(),
            )
        })
        .collect();
    let pdtp: Vec<(i64, i64, bool)> = want.iter().map(|&n| (n, n, true)).collect();
    if got == pdtp {
        Ok(())
    } else {
        Err(format!(
            "vLLM's schedulers move (local, remote, the last blocks) {got:?} per KV-cache \
             group of a {blocks}-block request; pdtp's transfer map ({rule:?}) {pdtp:?}"
        ))
    }
}

/// The transfer map's `sliding_window_blocks` for a sliding-window READ vector.
fn map_windows(v: &FlowVector, profile: &super::ConnectorProfile) -> Option<super::SlidingBlocks> {
    crate::transfer::transfer_map_of(v.p, v.d, v.h, v.mla, (false, true), profile)
        .ok()
        .and_then(|m| m.sliding_window_blocks)
        // A pair pdtp refuses has no map: its windows are the rule's all the same (the
        // schedulers clip before any worker runs).
        .or_else(|| profile.rules.sliding_window_blocks())
}

/// One vector: vLLM's recorded outcome against pdtp's report and flow.
fn compare_flow_vector(
    v: &FlowVector,
    outcome: &Value,
    profile: &super::ConnectorProfile,
) -> Result<(), String> {
    use crate::check::consequence;
    let (report, flow) = pdtp_flow_report(v, profile);
    let verdict = outcome[0].as_array().expect("verdict");
    let first = report.violations.first();
    if let Some(windows) = outcome.get(3) {
        let rule = map_windows(v, profile).ok_or("no sliding_window_blocks in pdtp's map")?;
        compare_windows(windows, rule)?;
    }
    if let Some(r) = compare_start(verdict, &report) {
        return r;
    }
    if let Some(r) = compare_refusal(v, verdict, &report, &[FLOW_ENGINE]) {
        return r;
    }
    // vLLM raises nothing: what happened to each request.
    let requests = outcome[1].as_array().expect("requests");
    let mut wrong = None;
    let mut leak = false;
    let mut held = false;
    for req in requests {
        let pdp = req[0].as_i64().unwrap();
        for (r, reads) in req[2].as_array().unwrap().iter().enumerate() {
            for got in reads.as_array().unwrap() {
                let (dp, tp) = (got[0].as_i64().unwrap(), got[1].as_i64().unwrap());
                let heads_differ =
                    vllm_heads(tp, v.p, v.h, v.mla) != vllm_heads(r as i64, v.d, v.h, v.mla);
                if wrong.is_none() && (dp != pdp || heads_differ) {
                    wrong = Some(format!(
                        "decode rank {r} reads prefill DP {dp} TP {tp} for a request of DP {pdp}"
                    ));
                }
            }
        }
        match req[6].as_str().unwrap() {
            "never" => leak = true,
            "timeout" => held = true,
            _ => {}
        }
    }
    if let Some(what) = wrong {
        return match first {
            Some(x) if x.error == VllmError::None && x.consequence == consequence::WRONG_BYTES => {
                Ok(())
            }
            other => Err(format!("vLLM: {what} (wrong KV); pdtp {other:?}")),
        };
    }
    if leak {
        return match first {
            Some(x) if x.error == VllmError::None && x.consequence == consequence::LEAK => Ok(()),
            other => Err(format!(
                "vLLM never frees a request's blocks; pdtp {other:?}"
            )),
        };
    }
    if let Some(x) = first {
        return Err(format!("vLLM serves every request; pdtp refuses: {x:?}"));
    }
    let flow = flow.map_err(|x| format!("pdtp's report is clean but its flow fails: {x:?}"))?;
    // Reads, notifications and acks, request by request (a rotating source advances per
    // request on each decode DP rank, starting at that DP rank).
    let xgmi = v.backend == "xgmi";
    let mut seen = vec![0usize; v.ddp as usize];
    let mut rotated = false;
    for req in requests {
        let ddp = req[1].as_i64().unwrap() as usize;
        let j = seen[ddp];
        seen[ddp] += 1;
        let mut notified_count = vec![0i64; v.p as usize];
        for (r, f) in flow.decode.iter().enumerate() {
            // pdtp's `rotates` are the rdma backend's; on xgmi they hold where the flow says.
            let fixed = f.rotates.is_empty() || (xgmi && !flow.rotates_on_xgmi);
            let (src, releases) = if fixed {
                (f.sources[0].0, f.releases.clone())
            } else {
                let s = f.rotates[(ddp + j) % f.rotates.len()];
                let rel = if f.releases.len() == 1 {
                    vec![s]
                } else {
                    f.releases.clone()
                };
                (s, rel)
            };
            let reads = ints(&req[2][r].as_array().unwrap()[0]);
            if reads[1] != src {
                return Err(format!(
                    "request {j} on decode DP {ddp}: decode rank {r} reads prefill TP {}, pdtp {src}",
                    reads[1]
                ));
            }
            if !fixed && reads[1] != f.sources[0].0 {
                rotated = true;
            }
            let notified: Vec<i64> = req[3][r]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n[1].as_i64().unwrap())
                .collect();
            if notified != releases {
                return Err(format!(
                    "decode rank {r} notifies prefill TP {notified:?}, pdtp releases {releases:?}"
                ));
            }
            for q in releases {
                notified_count[q as usize] += 1;
            }
        }
        let acks = ints(&req[4]);
        let sent: Vec<bool> = req[5]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        for q in 0..v.p as usize {
            let want = notified_count[q] >= flow.expected_acks && notified_count[q] > 0;
            if acks[q] != notified_count[q] || sent[q] != want {
                return Err(format!(
                    "prefill rank {q}: vLLM receives {} acks and reports sent={}; pdtp counts \
                     {} releases, expects {} acks",
                    acks[q], sent[q], notified_count[q], flow.expected_acks
                ));
            }
        }
    }
    let warns = |c: &str| report.warnings.iter().any(|w| w.consequence == c);
    let pdtp_held = warns(consequence::HELD_UNTIL_TIMEOUT)
        || report
            .warnings
            .iter()
            .any(|w| w.consequence == consequence::ROUND_ROBIN && w.message.contains("hold"));
    if held != pdtp_held || (held && !flow.defer_timeout) {
        return Err(format!(
            "vLLM frees some request only by the deferred-send timeout: {held}; pdtp warns so: \
             {pdtp_held} (defer_timeout {})",
            flow.defer_timeout
        ));
    }
    let pdtp_rotates = warns(consequence::ROUND_ROBIN) && (!xgmi || flow.rotates_on_xgmi);
    if rotated != pdtp_rotates && requests.len() > 1 {
        return Err(format!(
            "vLLM rotates the prefill rank per request: {rotated}; pdtp's warnings {:?}",
            report.warnings
        ));
    }
    Ok(())
}

/// What a release's MoRIIO flow data shows over all its vectors: some request freed by the
/// deferred-send timeout, some never freed, some prefill notify listener dying of a release
/// message, and every request of every vector vLLM runs never freed.
#[derive(Clone, Copy, Default)]
struct FlowFacts {
    timeout: bool,
    never: bool,
    listener_dies: bool,
    all_never: bool,
}

fn flow_facts(release: &str) -> FlowFacts {
    static FACTS: std::sync::OnceLock<BTreeMap<String, FlowFacts>> = std::sync::OnceLock::new();
    let facts = FACTS.get_or_init(|| {
        let mut out = BTreeMap::new();
        let mut by_file: BTreeMap<String, FlowFacts> = BTreeMap::new();
        for (release, file) in index().get("flow-moriio").cloned().unwrap_or_default() {
            let Some(file) = file else { continue };
            let seen = *by_file.entry(file.clone()).or_insert_with(|| {
                let data = load(&file);
                let mut f = FlowFacts {
                    all_never: true,
                    ..FlowFacts::default()
                };
                // READ's TP and DP vectors (WRITE's requests record other facts).
                let outcomes = data["outcomes"].as_array().unwrap();
                let read: std::collections::BTreeSet<i64> = data["vectors"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .zip(ints(&data["codes"]))
                    .filter(|(v, _)| v[0] == "read" && v.as_array().unwrap().len() == 8)
                    .map(|(_, c)| c)
                    .collect();
                for o in read.iter().map(|&c| &outcomes[c as usize]) {
                    if o[0][0] != "ok" {
                        f.listener_dies |= !o[2].as_array().unwrap().is_empty();
                        continue;
                    }
                    for req in o[1].as_array().unwrap() {
                        f.timeout |= req[6] == "timeout";
                        f.never |= req[6] == "never";
                        f.all_never &= req[6] == "never";
                    }
                    f.listener_dies |= !o[2].as_array().unwrap().is_empty();
                }
                f
            });
            out.insert(release, seen);
        }
        out
    });
    facts.get(release).copied().unwrap_or_default()
}

/// The release's scheduler never reaps a deferred send (flow data: some request never freed,
/// none freed by a timeout).
fn flow_never_reaps(release: &str) -> bool {
    let f = flow_facts(release);
    f.never && !f.timeout
}

/// The release's prefill refuses the READ release acks (flow data: a notify listener dies of
/// a release and no request of any vector is ever freed).
fn flow_rejects_releases(release: &str) -> bool {
    let f = flow_facts(release);
    f.listener_dies && f.all_never && !f.timeout
}

/// Every release's MoRIIO flow data, every vector, zero disagreements.
#[test]
fn pdtp_agrees_with_vllm_moriio_flow() {
    let index = index();
    let runs = index
        .get("flow-moriio")
        .expect("flow-moriio in the golden index");
    let mut failures = Vec::new();
    let mut total = 0u64;
    let mut skipped = 0u64;
    let mut sliding_served = 0u64;
    let mut xgmi_write = 0u64;
    let mut windows = 0u64;
    let mut releases = 0u64;
    let mut cache: BTreeMap<&str, Value> = BTreeMap::new();
    for (release, file) in runs {
        let Some(file) = file else {
            assert!(resolve(&format!("moriio@{release}")).is_err(), "{release}");
            continue;
        };
        let data = cache.entry(file.as_str()).or_insert_with(|| load(file));
        let profile = resolve(&format!("moriio@{release}"))
            .expect("moriio in this release")
            .profile;
        let outcomes = data["outcomes"].as_array().expect("outcomes");
        let codes = ints(&data["codes"]);
        let vectors = data["vectors"].as_array().expect("vectors");
        assert_eq!(codes.len(), vectors.len());
        let write_profile = resolve(&format!("moriio-write@{release}"))
            .expect("moriio-write in this release")
            .profile;
        let mut tally = Tally::default();
        // WRITE never reads the backend past the engine's creation (`tools/vllm_flow.py`,
        // `check_backend_readers`): each xgmi WRITE vector's outcome is its rdma twin's.
        let rdma: BTreeMap<String, i64> = vectors
            .iter()
            .zip(&codes)
            .filter(|(v, _)| v[0] == "write" && v[7] == "rdma")
            .map(|(v, &c)| {
                let mut k = v.as_array().unwrap().clone();
                k[7] = Value::from("xgmi");
                (Value::from(k).to_string(), c)
            })
            .collect();
        for (vec, &code) in vectors.iter().zip(&codes) {
            let a = vec.as_array().unwrap();
            if a[0] == "write" && a[7] == "xgmi" {
                xgmi_write += 1;
                assert_eq!(
                    rdma.get(&vec.to_string()),
                    Some(&code),
                    "moriio-write@{release} {vec}: xgmi and rdma differ"
                );
            }
            let v = FlowVector::parse(a);
            let outcome = &outcomes[code as usize];
            let kind = outcome[0][0].as_str().unwrap();
            // Every vector is compared: the driver stops (never writes data) where it does
            // not model what vLLM does, and no vector is left at an engine start that
            // succeeds (a sliding-window group that starts is driven through its transfer; a
            // Mamba group's registration refuses). A release that unifies a sliding window to
            // full attention runs (and is compared as) the dense flow.
            if !matches!(kind, "ok" | "engine_start" | "handshake" | "first_transfer") {
                skipped += 1;
                continue;
            }
            sliding_served += u64::from(v.hybrid == "sliding" && kind == "ok");
            windows += u64::from(outcome.get(3).is_some());
            let r = v.attention_counts().into_iter().try_for_each(|heads| {
                let v = FlowVector {
                    a: heads,
                    ..FlowVector::parse(a)
                };
                if a[0] == "write" {
                    compare_write_flow_vector(&v, outcome, write_profile)
                } else {
                    compare_flow_vector(&v, outcome, profile)
                }
                .map_err(|e| format!("A{heads}: {e}"))
            });
            tally.check(r.is_ok(), || {
                format!(
                    "flow {}@{release} P{} D{} H{} mla={} dp {}x{} pp {}x{} {} {}: {}",
                    if a[0] == "write" {
                        "moriio-write"
                    } else {
                        "moriio"
                    },
                    v.p,
                    v.d,
                    v.h,
                    v.mla,
                    v.pdp,
                    v.ddp,
                    v.ppp,
                    v.dpp,
                    v.hybrid,
                    v.backend,
                    r.unwrap_err()
                )
            });
        }
        println!(
            "flow moriio@{release} ({file}): {} vectors, {} disagreements",
            tally.vectors,
            tally.mismatches.len()
        );
        total += tally.vectors;
        releases += 1;
        failures.extend(tally.mismatches);
    }
    println!("flow moriio: {releases} releases, {total} vectors compared, {skipped} not compared");
    assert_eq!(
        skipped, 0,
        "vectors recorded with a verdict the test does not compare"
    );
    println!("flow moriio: {xgmi_write} WRITE vectors on xgmi, each its rdma twin's outcome");
    assert!(xgmi_write > 0, "no WRITE vector on xgmi");
    println!("flow moriio: {windows} sliding-window READ vectors' block windows compared");
    assert!(windows > 0, "no sliding-window block windows compared");
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total > 10_000, "{total}");
    assert!(
        sliding_served > 0,
        "no sliding-window vector's requests compared"
    );
}

// ------------------------------------------------------------------ MoRIIO WRITE's flow
//
// The same driver runs WRITE mode (`tools/vllm_flow.py`, `_write_requests`): the decode
// scheduler's block notices, the prefill ranks' handshake with the decode, their write tasks
// and write worker, the decode ranks' `get_finished`, and the prefill ranks' again past the
// deferred-write timeout. Per request: [prefill DP, decode DP, writes per prefill rank
// ([decode DP, decode TP, source heads, target heads], rank-local first/last), the prefill
// (DP, TP) each block notice reached (null: nobody bound it), per decode rank whether it
// reported the KV received, per prefill rank the acks it got, its state (`w` wrote and
// reported sent, `x` its task expired and was marked done, `-` never sent), and the freed
// kind (acks / timeout / never)].

/// The decode engine id a WRITE prefill rank dials (`host:handshake_port`).
const FLOW_ENGINE_DECODE: &str = "10.0.1.1:7301";

/// Per decode rank, the (prefill rank, global KV heads) written to it.
type Sources = Vec<Vec<(i64, Vec<i64>)>>;

/// What vLLM's WRITE flow did to one vector's requests, as pdtp's consequences name it.
#[derive(Debug, PartialEq)]
enum WriteOutcome {
    /// Some decode rank never reports the KV received: the request waits forever.
    Hang(String),
    /// Some decode rank runs with KV heads another rank's bytes (or none) filled.
    WrongBytes(String),
    /// Some request's prefill blocks are never freed.
    Leak,
    /// Served: per decode rank the (prefill rank, global KV heads) written to it; the prefill
    /// ranks whose tasks expired; whether some request waited for the deferred timeout.
    Served {
        sources: Sources,
        expired: Vec<i64>,
        timeout: bool,
    },
}

fn write_outcome(v: &FlowVector, requests: &[Value]) -> Result<WriteOutcome, String> {
    let mut first_sources: Option<Sources> = None;
    let mut expired: Vec<i64> = Vec::new();
    let mut timeout = false;
    let mut leak = false;
    for req in requests {
        let ddp = req[1].as_i64().unwrap();
        let writes = req[2].as_array().unwrap();
        let recv: Vec<bool> = req[4]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        let acks = ints(&req[5]);
        let state: Vec<&str> = req[6]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        if let Some(r) = recv.iter().position(|x| !x) {
            return Ok(WriteOutcome::Hang(format!(
                "decode rank {r} never reports the KV received"
            )));
        }
        let mut sources: Sources = vec![Vec::new(); v.d as usize];
        let mut covered: Vec<Vec<bool>> = (0..v.d)
            .map(|r| vec![false; vllm_heads(r, v.d, v.h, v.mla).len()])
            .collect();
        for (q, ws) in writes.iter().enumerate() {
            let src_first = vllm_heads(q as i64, v.p, v.h, v.mla)[0];
            for w in ws.as_array().unwrap() {
                let (dp, tp) = (w[0].as_i64().unwrap(), w[1].as_i64().unwrap());
                let (a, b) = (ints(&w[2]), ints(&w[3]));
                let dst_first = vllm_heads(tp, v.d, v.h, v.mla)[0];
                let src: Vec<i64> = (src_first + a[0]..=src_first + a[1]).collect();
                let dst: Vec<i64> = (dst_first + b[0]..=dst_first + b[1]).collect();
                if dp != ddp || src != dst {
                    return Ok(WriteOutcome::WrongBytes(format!(
                        "prefill rank {q} writes its heads {src:?} into decode DP {dp} rank \
                         {tp}'s heads {dst:?} (request of decode DP {ddp})"
                    )));
                }
                for x in b[0]..=b[1] {
                    covered[tp as usize][x as usize] = true;
                }
                sources[tp as usize].push((q as i64, dst));
            }
        }
        if let Some(r) = covered.iter().position(|c| c.iter().any(|x| !x)) {
            return Ok(WriteOutcome::WrongBytes(format!(
                "decode rank {r} reports the KV received but some of its heads were never \
                 written"
            )));
        }
        for (q, s) in state.iter().enumerate() {
            // A rank reports the request sent on one ack (its own write's, or the expiry's).
            if *s != "-" && acks[q] < 1 {
                return Err(format!(
                    "prefill rank {q} reports sent with {} acks",
                    acks[q]
                ));
            }
            if *s == "x" && !expired.contains(&(q as i64)) {
                expired.push(q as i64);
            }
        }
        match req[7].as_str().unwrap() {
            "never" => leak = true,
            "timeout" => timeout = true,
            _ => {}
        }
        match &first_sources {
            None => first_sources = Some(sources),
            Some(f) if *f != sources => {
                return Err(format!("requests write differently: {f:?} vs {sources:?}"))
            }
            _ => {}
        }
    }
    if leak {
        return Ok(WriteOutcome::Leak);
    }
    expired.sort();
    Ok(WriteOutcome::Served {
        sources: first_sources.unwrap_or_default(),
        expired,
        timeout,
    })
}

/// One WRITE vector: vLLM's recorded outcome against pdtp's report and flow.
fn compare_write_flow_vector(
    v: &FlowVector,
    outcome: &Value,
    profile: &super::ConnectorProfile,
) -> Result<(), String> {
    use crate::check::consequence;
    let (report, flow) = pdtp_flow_report(v, profile);
    let verdict = outcome[0].as_array().expect("verdict");
    let first = report.violations.first();
    if let Some(windows) = outcome.get(3) {
        let rule = map_windows(v, profile).ok_or("no sliding_window_blocks in pdtp's map")?;
        compare_windows(windows, rule)?;
    }
    if let Some(r) = compare_start(verdict, &report) {
        return r;
    }
    if let Some(r) = compare_refusal(v, verdict, &report, &[FLOW_ENGINE_DECODE, FLOW_ENGINE]) {
        return r;
    }
    let requests = outcome[1].as_array().expect("requests");
    let silent = |c: &str| match first {
        Some(x) if x.error == VllmError::None && x.consequence == c => Ok(()),
        other => Err(other.cloned()),
    };
    match write_outcome(v, requests)? {
        WriteOutcome::Hang(what) => {
            silent(consequence::HANG).map_err(|o| format!("vLLM: {what} (hang); pdtp {o:?}"))
        }
        WriteOutcome::WrongBytes(what) => silent(consequence::WRONG_BYTES)
            .map_err(|o| format!("vLLM: {what} (wrong KV); pdtp {o:?}")),
        WriteOutcome::Leak => silent(consequence::LEAK)
            .map_err(|o| format!("vLLM never frees a request's blocks; pdtp {o:?}")),
        WriteOutcome::Served {
            sources,
            expired,
            timeout,
        } => {
            if let Some(x) = first {
                return Err(format!("vLLM serves every request; pdtp refuses: {x:?}"));
            }
            let flow =
                flow.map_err(|x| format!("pdtp's report is clean, its flow fails: {x:?}"))?;
            for (r, want) in sources.iter().enumerate() {
                let mut mine = flow.decode[r].sources.clone();
                mine.sort();
                if mine != *want {
                    return Err(format!(
                        "decode rank {r}: vLLM writes {want:?}, pdtp {mine:?}"
                    ));
                }
            }
            if flow.expected_acks != 1 {
                return Err(format!(
                    "a WRITE prefill rank reports sent on one ack; pdtp expects {}",
                    flow.expected_acks
                ));
            }
            if flow.idle_prefill != expired {
                return Err(format!(
                    "vLLM expires the tasks of prefill ranks {expired:?}; pdtp's idle ranks {:?}",
                    flow.idle_prefill
                ));
            }
            let warned = report
                .warnings
                .iter()
                .any(|w| w.consequence == consequence::RANKS_IDLE);
            if timeout != warned {
                return Err(format!(
                    "vLLM holds some request's blocks until the deferred timeout: {timeout}; \
                     pdtp warns so: {warned}"
                ));
            }
            Ok(())
        }
    }
}

/// Per decode rank the (prefill rank, KV heads) written, and the prefill ranks whose tasks
/// expired.
type Served = (Sources, Vec<i64>);

/// What the release's WRITE flow data shows for a pair it serves, else `None`. A pair of
/// one decode rank and replicated KV (one KV head, or MLA) whose prefill TP the flow grid lacks
/// is answered from the class: the flow must show prefill rank 0 writing everything and the
/// others' tasks expiring for every P > 1 of its grid.
fn flow_write_served(release: &str, p: i64, d: i64, h: i64, mla: bool) -> Option<Served> {
    type Table = BTreeMap<(i64, i64, i64, bool), Option<Served>>;
    static TABLES: std::sync::OnceLock<BTreeMap<String, Table>> = std::sync::OnceLock::new();
    let tables = TABLES.get_or_init(|| {
        let mut by_file: BTreeMap<String, Table> = BTreeMap::new();
        let mut out = BTreeMap::new();
        for (release, file) in index().get("flow-moriio").cloned().unwrap_or_default() {
            let Some(file) = file else { continue };
            let table = by_file
                .entry(file.clone())
                .or_insert_with(|| {
                    let data = load(&file);
                    let outcomes = data["outcomes"].as_array().unwrap();
                    let mut t = Table::new();
                    for (vec, code) in data["vectors"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .zip(ints(&data["codes"]))
                    {
                        let a = vec.as_array().unwrap();
                        if a[0] != "write" || a[5] != 1 || a[6] != 1 {
                            continue;
                        }
                        if a.len() > 8 || a[7] != "rdma" {
                            continue; // pipeline and hybrid vectors, xgmi twins
                        }
                        let v = FlowVector::parse(a);
                        let o = &outcomes[code as usize];
                        let served = if o[0][0] == "ok" {
                            match write_outcome(&v, o[1].as_array().unwrap()) {
                                Ok(WriteOutcome::Served {
                                    sources, expired, ..
                                }) => Some((sources, expired)),
                                _ => None,
                            }
                        } else {
                            None
                        };
                        t.insert((v.p, v.d, v.h, v.mla), served);
                    }
                    t
                })
                .clone();
            out.insert(release, table);
        }
        out
    });
    let table = tables.get(release)?;
    if let Some(got) = table.get(&(p, d, h, mla)) {
        return got.clone();
    }
    // One decode rank and replicated KV: rank 0 writes, the others expire, for every P > 1
    // of the grid (else no answer).
    if d != 1 || !(h == 1 || mla) || p < 2 {
        return None;
    }
    // MLA: one latent head whatever the model's head count.
    let in_class =
        |(q, e, g, m): (i64, i64, i64, bool)| q > 1 && e == 1 && (g == h || mla) && m == mla;
    let class: Vec<&Option<Served>> = table
        .iter()
        .filter(|&(&k, _)| in_class(k))
        .map(|(_, s)| s)
        .collect();
    let heads = vllm_heads(0, 1, h, mla);
    let rank0 = |q: i64, s: &Option<Served>| {
        s.as_ref().is_some_and(|(src, exp)| {
            *src == vec![vec![(0, heads.clone())]] && *exp == (1..q).collect::<Vec<_>>()
        })
    };
    let all = !class.is_empty()
        && table
            .iter()
            .filter(|&(&k, _)| in_class(k))
            .all(|((q, ..), s)| rank0(*q, s));
    all.then(|| (vec![vec![(0, heads)]], (1..p).collect()))
}

/// What the release's WRITE flow data shows (`hang`, `wrong_bytes`, `leak`, `served`, `error`)
/// over its TP-only vectors (one DP rank a side, no pipeline, dense) that `pick` selects:
/// each kind once, in order.
fn flow_write_kinds(release: &str, pick: impl Fn(&FlowVector) -> bool) -> Vec<&'static str> {
    type Kinds = Vec<(FlowVector, &'static str)>;
    static KINDS: std::sync::OnceLock<BTreeMap<String, std::sync::Arc<Kinds>>> =
        std::sync::OnceLock::new();
    let all = KINDS.get_or_init(|| {
        let mut by_file: BTreeMap<String, std::sync::Arc<Kinds>> = BTreeMap::new();
        let mut out = BTreeMap::new();
        for (release, file) in index().get("flow-moriio").cloned().unwrap_or_default() {
            let Some(file) = file else { continue };
            let kinds = by_file
                .entry(file.clone())
                .or_insert_with(|| {
                    let data = load(&file);
                    let outcomes = data["outcomes"].as_array().unwrap();
                    let mut k = Kinds::new();
                    for (vec, code) in data["vectors"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .zip(ints(&data["codes"]))
                    {
                        let a = vec.as_array().unwrap();
                        if a[0] != "write" || a.len() > 8 || a[5] != 1 || a[6] != 1 {
                            continue;
                        }
                        let v = FlowVector::parse(a);
                        let o = &outcomes[code as usize];
                        let kind = if o[0][0] != "ok" {
                            if o[0][1] == "hang" {
                                "hang"
                            } else {
                                "error"
                            }
                        } else {
                            match write_outcome(&v, o[1].as_array().unwrap()) {
                                Ok(WriteOutcome::Hang(_)) => "hang",
                                Ok(WriteOutcome::WrongBytes(_)) => "wrong_bytes",
                                Ok(WriteOutcome::Leak) => "leak",
                                Ok(WriteOutcome::Served { .. }) => "served",
                                Err(_) => "error",
                            }
                        };
                        k.push((v, kind));
                    }
                    std::sync::Arc::new(k)
                })
                .clone();
            out.insert(release, kinds);
        }
        out
    });
    let mut seen: Vec<&'static str> = Vec::new();
    if let Some(kinds) = all.get(release) {
        for (v, kind) in kinds.iter() {
            if pick(v) && !seen.contains(kind) {
                seen.push(kind);
            }
        }
    }
    seen
}

/// The block windows compare: every release's recorded windows fail against the other rule
/// (0.30.0 on the sliding-window group moves only the last `cdiv(window, block) + 1`
/// blocks, 0.30.0 `moriio_connector.py:441`; before, one unified group moves all).
#[test]
fn moriio_flow_windows_fail_with_the_other_rule() {
    use super::SlidingBlocks;
    let mut checked = 0;
    for (release, file) in index().get("flow-moriio").cloned().unwrap_or_default() {
        let Some(file) = file else { continue };
        let data = load(&file);
        let profile = resolve(&format!("moriio@{release}")).unwrap().profile;
        let super::Rules::MoriioRead(r) = profile.rules else {
            panic!("moriio@{release}")
        };
        let other = match r.sliding_blocks {
            SlidingBlocks::Every => SlidingBlocks::LastWindow,
            SlidingBlocks::LastWindow => SlidingBlocks::Every,
        };
        let outcomes = data["outcomes"].as_array().unwrap();
        for (vec, code) in data["vectors"]
            .as_array()
            .unwrap()
            .iter()
            .zip(ints(&data["codes"]))
        {
            let Some(windows) = outcomes[code as usize].get(3) else {
                continue;
            };
            assert!(vec[0] == "read" && vec[10] == "sliding", "{vec}");
            assert!(
                compare_windows(windows, r.sliding_blocks).is_ok(),
                "{release} {vec}"
            );
            assert!(compare_windows(windows, other).is_err(), "{release} {vec}");
            checked += 1;
        }
    }
    assert!(checked > 0);
}

/// 0.27.0-0.29.0 (MoRIIO still no `SupportsHMA`) refuse a Mamba model in the engine core:
/// `_promote_local_kv_cache_specs` (0.27.0 `vllm/v1/core/kv_cache_utils.py:1529`) keeps
/// attention beside Mamba two types; 0.30.0 each worker's `register_kv_caches` meets the
/// Mamba layer's view (`moriio_layout.py:236`) before the engine core builds the scheduler
/// (0.30.0 `vllm/v1/engine/core.py:145`, then `:162`); 0.31.0-0.33.0 each worker's
/// `register_kv_caches` refuses vLLM's default conv-state layout (0.31.0
/// `moriio_connector.py:2312`). The flow data records each for every Mamba vector, and pdtp
/// names them.
#[test]
fn moriio_flow_mamba_refusals_per_release() {
    use super::{MORIIO_HYBRID_CONV_LAYOUT, MORIIO_HYBRID_CORE_027, MORIIO_HYBRID_WORKER_030};
    for (release, want, modes) in [
        ("0.27.0", MORIIO_HYBRID_CORE_027, &["read", "write"][..]),
        ("0.29.0", MORIIO_HYBRID_CORE_027, &["read", "write"]),
        ("0.30.0", MORIIO_HYBRID_WORKER_030, &["read", "write"]),
        ("0.31.0", MORIIO_HYBRID_CONV_LAYOUT, &["read"]),
        ("0.33.0", MORIIO_HYBRID_CONV_LAYOUT, &["read", "write"]),
    ] {
        let file = index()["flow-moriio"][release].clone().unwrap();
        let data = load(&file);
        let outcomes = data["outcomes"].as_array().unwrap();
        let mut n = 0;
        for (vec, code) in data["vectors"]
            .as_array()
            .unwrap()
            .iter()
            .zip(ints(&data["codes"]))
        {
            if vec.get(10).and_then(Value::as_str) != Some("mamba")
                || !modes.contains(&vec[0].as_str().unwrap())
            {
                continue;
            }
            let verdict = &outcomes[code as usize][0];
            assert_eq!(verdict[0], "engine_start", "{release} {vec}");
            assert_eq!(
                flow_mamba_text(verdict[2].as_str().unwrap()),
                want,
                "{release} {vec}"
            );
            let connector = if vec[0] == "read" {
                "moriio"
            } else {
                "moriio-write"
            };
            let profile = resolve(&format!("{connector}@{release}")).unwrap().profile;
            let shape = Shape {
                num_attention_heads: 192,
                num_kv_heads: 8,
                is_mla: vec[4].as_bool().unwrap(),
                hybrid: true,
                sliding_window: false,
                mamba_groups: None,
            };
            let r = crate::check::check_pair(&shape, 2, 2, profile, None);
            assert_eq!(r.violations[0].message, want, "{release} {connector}");
            n += 1;
        }
        assert!(n >= 12, "{release}: {n}");
    }
}
