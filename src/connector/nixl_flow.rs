//! pdtp against vLLM's NIXL *flow*, release by release.
//!
//! `tools/vllm_flow_nixl.py` runs each release's NIXL worker code for a whole request — the
//! background handshake and what its callbacks do with a failure, the reads, every
//! notification, each prefill rank's notification counting and the abort-timeout expiry,
//! and the engine start's handshake-metadata hook with pipeline stages — and writes what
//! happened to `tests/data/golden/flow-nixl-*.json.gz` (`index.json` part `flow-nixl`).
//! This test resolves `nixl@release` as users do and compares, for every vector: the
//! verdict (the exception class and text, when it reaches the user and what becomes of the
//! request), per decode rank the prefill ranks it reads and notifies and the KV heads each
//! read moves (decoded from the release's own descriptors; hybrid models by rank), and per
//! prefill rank the notifications it receives and whether they free the request or only the
//! timeout does. Each vector carries attention heads 192, H or 3H for pdtp's check.
//! Pipeline layouts compare the engine start; data-parallel layouts the handshake ports each
//! DP rank's scheduler binds and the TP flow's verdict.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;

use flate2::read::GzDecoder;
use serde_json::Value;

use super::{resolve, ConnectorProfile, NixlHandshakeFailure, Rules};
use crate::check::{
    connector_flow, consequence, nixl_consequence, PairReport, Shape, Stage, VllmError,
};

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

fn runs() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(golden_dir().join("index.json")).expect("index.json");
    let index: BTreeMap<String, Value> = serde_json::from_str(&text).expect("index json");
    let part = index
        .get("flow-nixl")
        .expect("flow-nixl in the golden index");
    part.as_object()
        .expect("object")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("file").to_string()))
        .collect()
}

/// The prefill engine id the driver's decode ranks use; pdtp's texts say `{remote_engine_id}`.
const FLOW_ENGINE: &str = "prefill";

struct Vector {
    p: i64,
    d: i64,
    h: i64,
    mla: bool,
    hybrid: bool,
    ppp: i64,
    dpp: i64,
    pdp: i64,
    ddp: i64,
    /// Attention heads (192, H or 3H): NIXL never reads them; pdtp's check does.
    a: i64,
    /// The model has sliding-window layers (their own KV-cache group from 0.18.0).
    sliding: bool,
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_i64().expect("int"))
        .collect()
}

fn report_of(v: &Vector, profile: &ConnectorProfile) -> PairReport {
    let shape = Shape {
        num_attention_heads: v.a,
        num_kv_heads: v.h,
        is_mla: v.mla,
        hybrid: v.hybrid,
        sliding_window: v.sliding,
    };
    super::golden::grid_report(shape, (v.p, v.ppp, v.pdp), (v.d, v.dpp, v.ddp), profile)
}

/// What vLLM's scheduler does with a request whose KV load failed, by the release's
/// `kv_load_failure_policy` default (`None`: no such field, 0.12.0 recomputes).
fn failure_consequence(policy: &Value) -> &'static str {
    match policy.as_str() {
        Some("fail") => nixl_consequence::REQUEST_FAILED,
        _ => nixl_consequence::RECOMPUTED_ON_DECODE,
    }
}

fn compare(
    v: &Vector,
    outcome: &Value,
    policy: &Value,
    profile: &ConnectorProfile,
) -> Result<(), String> {
    let report = report_of(v, profile);
    let first = report.violations.first();
    let verdict = outcome[0].as_array().expect("verdict");
    let kind = verdict[0].as_str().unwrap();
    match kind {
        "engine_start" => {
            let (class, message) = (verdict[1].as_str().unwrap(), verdict[2].as_str().unwrap());
            return match first {
                Some(x)
                    if x.when == Stage::EngineStart
                        && x.error.name() == class
                        && x.message == message =>
                {
                    Ok(())
                }
                other => Err(format!(
                    "vLLM {class}({message:?}) at engine start; pdtp {other:?}"
                )),
            };
        }
        "hang" => {
            return match first {
                Some(x) if x.error == VllmError::None && x.consequence == consequence::HANG => {
                    Ok(())
                }
                other => Err(format!(
                    "vLLM dials a prefill rank that does not exist; pdtp {other:?}"
                )),
            };
        }
        "handshake" => {
            let (class, message) = (verdict[1].as_str().unwrap(), verdict[2].as_str().unwrap());
            let fate = verdict[4].as_str().unwrap();
            let x = first.ok_or_else(|| {
                format!("vLLM {class}({message:?}) in the handshake; pdtp accepts")
            })?;
            if x.error.name() != class || x.message != message {
                return Err(format!(
                    "vLLM's handshake raises {class}({message:?}); pdtp {}({:?})",
                    x.error.name(),
                    x.message
                ));
            }
            let (shown, text) = x.user_error();
            let ok = match fate {
                // The request goes on to its read without a remote agent (0.11.x).
                "ready_without_agent" => {
                    let then = verdict[5].as_array().unwrap();
                    let want = then[1]
                        .as_str()
                        .unwrap()
                        .replace(FLOW_ENGINE, "{remote_engine_id}");
                    x.when == Stage::FirstTransfer
                        && shown.name() == then[0].as_str().unwrap()
                        && text == want
                }
                "failed_recv" => {
                    x.when == Stage::FirstTransfer
                        && x.surfaced.is_none()
                        && x.consequence == failure_consequence(policy)
                }
                "waits" => x.consequence == consequence::HANG,
                _ => false,
            };
            return if ok {
                Ok(())
            } else {
                Err(format!(
                    "vLLM: the handshake's {class} is only logged and the request is {fate} \
                     ({:?}, policy {policy}); pdtp says {} at {} ({:?}), consequence {:?}",
                    verdict.get(5),
                    shown.name(),
                    x.when.name(),
                    text,
                    x.consequence
                ))
            };
        }
        _ => {}
    }
    // vLLM runs it.
    if v.ppp > 1 || v.dpp > 1 {
        // Engine start passes; the stages' handshake is compared by the layout golden.
        return match first {
            Some(x) if x.when == Stage::EngineStart && x.error != VllmError::None => Err(format!(
                "vLLM starts the engine; pdtp says {}({:?}) at engine start",
                x.error.name(),
                x.message
            )),
            _ => Ok(()),
        };
    }
    if v.pdp > 1 || v.ddp > 1 {
        // Each DP rank is its own engine on its own handshake port: the TP flow's verdict.
        return match first {
            None => Ok(()),
            Some(x) => Err(format!(
                "vLLM runs every DP rank's flow; pdtp refuses: {} {}({:?})",
                x.code,
                x.error.name(),
                x.message
            )),
        };
    }
    if let Some(x) = first {
        return Err(format!(
            "vLLM runs it; pdtp refuses: {} {}({:?}) at {}",
            x.code,
            x.error.name(),
            x.message,
            x.when.name()
        ));
    }
    if outcome[1].is_null() {
        return Err("vLLM's reads were not recorded".into());
    }
    let shape = Shape {
        num_attention_heads: v.a,
        num_kv_heads: v.h,
        is_mla: v.mla,
        hybrid: v.hybrid,
        sliding_window: v.sliding,
    };
    let flow = connector_flow(&shape, v.p, v.d, profile).map_err(|e| format!("flow {e:?}"))?;
    let reads = outcome[1][0].as_array().unwrap();
    let notified = outcome[1][1].as_array().unwrap();
    // The KV heads each read moves, decoded from its descriptors (hybrid models: by rank).
    let moved = outcome[1][2].as_array();
    let mut count = vec![0i64; v.p as usize];
    for r in 0..v.d as usize {
        let f = &flow.decode[r];
        let mut pdtp_reads: Vec<i64> = f.sources.iter().map(|s| s.0).collect();
        pdtp_reads.sort();
        if ints(&reads[r]) != pdtp_reads {
            return Err(format!(
                "decode rank {r} reads prefill ranks {:?}; pdtp {pdtp_reads:?}",
                ints(&reads[r])
            ));
        }
        if let Some(moved) = moved {
            let mut theirs: Vec<(i64, Vec<i64>)> = Vec::new();
            for m in moved[r].as_array().unwrap() {
                let m = m.as_array().unwrap();
                if m.len() > 2 {
                    // A head copied into another head's slot: wrong bytes, which pdtp refuses.
                    return Err(format!(
                        "decode rank {r}'s read from prefill rank {} puts (remote, local) \
                         heads {} in the wrong slots; pdtp accepts",
                        m[0], m[3]
                    ));
                }
                theirs.push((m[0].as_i64().unwrap(), ints(&m[1])));
            }
            if theirs != f.sources {
                return Err(format!(
                    "decode rank {r} reads (prefill rank, KV heads) {theirs:?}; pdtp {:?}",
                    f.sources
                ));
            }
        }
        let mut got = ints(&notified[r]);
        got.sort();
        let mut want = f.releases.clone();
        want.sort();
        if got != want {
            return Err(format!(
                "decode rank {r} notifies prefill ranks {got:?}; pdtp releases {want:?}"
            ));
        }
        for q in got {
            count[q as usize] += 1;
        }
    }
    let counts = ints(&outcome[2][0]);
    let freed = outcome[2][1].as_array().unwrap();
    let mut held = Vec::new();
    for q in 0..v.p as usize {
        let by = freed[q].as_str().unwrap();
        let pdtp_frees = count[q] > 0 && count[q] >= flow.expected_acks;
        if counts[q] != count[q] || (by == "acks") != pdtp_frees {
            return Err(format!(
                "prefill rank {q}: {} notifications, freed by {by}; pdtp counts {} releases, \
                 expects {}",
                counts[q], count[q], flow.expected_acks
            ));
        }
        match by {
            "timeout" => held.push(q as i64),
            "never" => return Err(format!("prefill rank {q} never frees the request")),
            _ => {}
        }
    }
    let warned: Vec<_> = report
        .warnings
        .iter()
        .filter(|w| w.consequence == consequence::HELD_UNTIL_TIMEOUT)
        .collect();
    if held.is_empty() != warned.is_empty() {
        return Err(format!(
            "prefill ranks {held:?} hold the request until the abort timeout; pdtp warns {:?}",
            report.warnings
        ));
    }
    Ok(())
}

/// Every release's NIXL flow data, every vector, zero disagreements.
#[test]
fn pdtp_agrees_with_vllm_nixl_flow() {
    let mut failures = Vec::new();
    let mut total = 0u64;
    let mut releases = 0;
    let mut depth: BTreeMap<&str, u64> = BTreeMap::new();
    let mut cache: BTreeMap<String, Value> = BTreeMap::new();
    for (release, file) in runs() {
        let data = cache.entry(file.clone()).or_insert_with(|| load(&file));
        let profile = resolve(&format!("nixl@{release}")).expect("nixl").profile;
        assert!(matches!(profile.rules, Rules::Nixl(_)));
        let outcomes = data["outcomes"].as_array().expect("outcomes");
        let codes = ints(&data["codes"]);
        let vectors = data["vectors"].as_array().expect("vectors");
        assert_eq!(codes.len(), vectors.len());
        let policy = &data["load_failure_policy"];
        let mut bad = 0;
        for (vec, &code) in vectors.iter().zip(&codes) {
            let a = vec.as_array().unwrap();
            let v = Vector {
                p: a[0].as_i64().unwrap(),
                d: a[1].as_i64().unwrap(),
                h: a[2].as_i64().unwrap(),
                mla: a[3].as_bool().unwrap(),
                hybrid: a[4].as_bool().unwrap(),
                ppp: a[5].as_i64().unwrap(),
                dpp: a[6].as_i64().unwrap(),
                pdp: a[7].as_i64().unwrap(),
                ddp: a[8].as_i64().unwrap(),
                a: a[9].as_i64().unwrap(),
                sliding: a[10].as_bool().unwrap(),
            };
            total += 1;
            let outcome = &outcomes[code as usize];
            *depth.entry(depth_of(&v, outcome)).or_insert(0u64) += 1;
            if let Err(e) = compare(&v, outcome, policy, profile) {
                bad += 1;
                if failures.len() < 30 {
                    failures.push(format!(
                        "nixl@{release} P{} D{} H{} A{} mla={} hybrid={} swa={} pp {}x{} dp {}x{}: {e}",
                        v.p, v.d, v.h, v.a, v.mla, v.hybrid, v.sliding, v.ppp, v.dpp, v.pdp, v.ddp
                    ));
                }
            }
        }
        releases += 1;
        println!(
            "flow nixl@{release} ({file}): {} vectors, {bad} disagreements",
            vectors.len()
        );
    }
    assert!(
        failures.is_empty(),
        "{} disagreements (first 30):\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("flow nixl: {releases} releases, {total} vectors compared: {depth:?}");
    assert!(
        releases >= 35 && total > 100_000,
        "{releases} releases, {total} vectors"
    );
    // Every TP-only vector vLLM runs is compared read by read: by KV heads, hybrid models
    // (whose Mamba descriptors the driver does not build) by rank.
    assert!(
        depth["heads"] > 40_000
            && depth["ranks (hybrid)"] > 10_000
            && depth["heads (sliding window)"] > 10_000,
        "{depth:?}"
    );
}

/// How deep one vector is compared (what the driver recorded for it).
fn depth_of(v: &Vector, outcome: &Value) -> &'static str {
    if v.ppp > 1 || v.dpp > 1 {
        "engine start (PP)"
    } else if v.pdp > 1 || v.ddp > 1 {
        "ports and verdict (DP)"
    } else if outcome[0][0] != "ok" {
        "verdict (class, message, moment, fate)"
    } else if outcome[1][2].is_null() {
        "ranks (hybrid)"
    } else if v.sliding {
        "heads (sliding window)"
    } else {
        "heads"
    }
}

/// The handshake failure of each release range is a fact of its row: 0.11.0 queues the
/// request as ready (`request_ready` puts it whatever the future holds, 0.11.0
/// `nixl_connector.py:729`); 0.11.1 on queues it as failed (`_failed_recv_reqs`, 0.12.0
/// `nixl_connector.py:1129`), recomputed until 0.17.0, failed from 0.17.0
/// (`kv_load_failure_policy = "fail"`, 0.17.0 `vllm/config/kv_transfer.py`).
#[test]
fn nixl_handshake_failure_rows() {
    let of = |v: &str| match resolve(&format!("nixl@{v}")).unwrap().profile.rules {
        Rules::Nixl(r) => r.handshake_failure,
        _ => unreachable!(),
    };
    assert_eq!(of("0.11.0"), NixlHandshakeFailure::ReadsWithoutAgent);
    assert_eq!(of("0.11.1"), NixlHandshakeFailure::Recomputed);
    assert_eq!(of("0.12.0"), NixlHandshakeFailure::Recomputed);
    assert_eq!(of("0.16.0"), NixlHandshakeFailure::Recomputed);
    assert_eq!(of("0.17.0"), NixlHandshakeFailure::RequestFails);
    assert_eq!(of("0.33.0"), NixlHandshakeFailure::RequestFails);
}

/// 0.20.0 on, a hybrid model (Mamba-2 / Gated DeltaNet layers) with prefill TP > decode TP
/// reads every prefill rank of its group, not only those holding distinct KV heads: each
/// holds its own shard of the Mamba state (`target_remote_ranks` returns
/// `remote_all_source_ranks`, 0.20.0 `kv_connector/utils.py:630`; `ssm_ranks`, 0.33.0
/// `nixl/tp_mapping.py:135`). The ranks whose KV heads another rank already sent move Mamba
/// state only (no heads), and every one of them is notified and frees the request.
#[test]
fn nixl_hybrid_reads_every_prefill_rank_from_020() {
    let flow = |v: &str, hybrid: bool| {
        let profile = resolve(&format!("nixl@{v}")).unwrap().profile;
        let shape = Shape {
            num_attention_heads: 16,
            num_kv_heads: 1,
            is_mla: false,
            hybrid,
            sliding_window: false,
        };
        connector_flow(&shape, 8, 2, profile)
    };
    // P = 8 > D = 2 > H = 1: decode rank 1 reads prefill ranks 4-7, head 0 from rank 4.
    let f = flow("0.20.0", true).expect("vLLM 0.20.0 runs it");
    assert_eq!(
        f.decode[1].sources,
        vec![(4, vec![0]), (5, vec![]), (6, vec![]), (7, vec![])]
    );
    assert_eq!(f.decode[1].releases, vec![4, 5, 6, 7]);
    assert_eq!(f.expected_acks, 1);
    for v in ["0.24.0", "0.33.0"] {
        assert_eq!(flow(v, true).unwrap().decode[1].sources.len(), 4, "{v}");
    }
    // The same pair of a model without Mamba layers: the replicated fan-in assert.
    assert_eq!(
        flow("0.20.0", false).unwrap_err().code,
        "replicated_kv_prefill_larger"
    );
    // P > D <= H: every prefill rank holds distinct heads, hybrid or not.
    let profile = resolve("nixl@0.33.0").unwrap().profile;
    let gqa = Shape {
        num_attention_heads: 32,
        num_kv_heads: 8,
        is_mla: false,
        hybrid: true,
        sliding_window: false,
    };
    let f = connector_flow(&gqa, 4, 2, profile).unwrap();
    assert_eq!(f.decode[0].sources, vec![(0, vec![0, 1]), (1, vec![2, 3])]);
}

/// The heads comparison can fail: a read recorded as moving a whole prefill block (every
/// head the prefill rank holds, as a same-rank copy would) is a disagreement with pdtp,
/// which has each decode rank of P = 2 < D = 4 (8 KV heads) take its own 2 heads.
#[test]
fn nixl_flow_heads_comparison_fails_on_other_heads() {
    let (release, file) = runs().into_iter().next_back().expect("a release");
    let data = load(&file);
    let profile = resolve(&format!("nixl@{release}")).unwrap().profile;
    let vectors = data["vectors"].as_array().unwrap();
    let codes = ints(&data["codes"]);
    let at = vectors
        .iter()
        .position(|v| {
            let a = v.as_array().unwrap();
            (0..3).map(|i| a[i].as_i64().unwrap()).collect::<Vec<_>>() == [2, 4, 8]
                && !a[3].as_bool().unwrap()
                && !a[4].as_bool().unwrap()
                && !a[10].as_bool().unwrap()
                && a[9].as_i64().unwrap() == 192
        })
        .expect("P2 D4 H8 in the grid");
    let v = Vector {
        p: 2,
        d: 4,
        h: 8,
        mla: false,
        hybrid: false,
        ppp: 1,
        dpp: 1,
        pdp: 1,
        ddp: 1,
        a: 192,
        sliding: false,
    };
    let mut outcome = data["outcomes"][codes[at] as usize].clone();
    let policy = &data["load_failure_policy"];
    assert_eq!(compare(&v, &outcome, policy, profile), Ok(()));
    assert_eq!(outcome[1][2][1], serde_json::json!([[0, [2, 3]]]));
    outcome[1][2][1] = serde_json::json!([[0, [0, 1, 2, 3]]]);
    let err = compare(&v, &outcome, policy, profile).unwrap_err();
    assert!(err.contains("decode rank 1 reads"), "{err}");
    outcome[1][2][1] = serde_json::json!([[0, [2, 3], "misplaced", [[2, 3], [3, 2]]]]);
    assert!(compare(&v, &outcome, policy, profile)
        .unwrap_err()
        .contains("wrong slots"));
}
