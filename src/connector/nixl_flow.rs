//! pdtp against vLLM's NIXL *flow*, release by release.
//!
//! `tools/vllm_flow_nixl.py` runs each release's NIXL worker code for a whole request — the
//! background handshake and what its callbacks do with a failure, the reads, every
//! notification, each prefill rank's notification counting and the abort-timeout expiry,
//! and the engine start's handshake-metadata hook with pipeline stages — and writes what
//! happened to `tests/data/golden/flow-nixl-*.json.gz` (`index.json` part `flow-nixl`).
//! This test resolves `nixl@release` as users do and compares, for every vector: the
//! verdict (the exception class and text, when it reaches the user and what becomes of the
//! request), per decode rank the prefill ranks it reads and notifies, and per prefill rank
//! the notifications it receives and whether they free the request or only the timeout does.
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
        num_attention_heads: 192, // every TP size of the grid divides it
        num_kv_heads: v.h,
        is_mla: v.mla,
        hybrid: v.hybrid,
        sliding_window: false,
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
        return Ok(()); // hybrid: the verdict only
    }
    let shape = Shape {
        num_attention_heads: 192,
        num_kv_heads: v.h,
        is_mla: v.mla,
        hybrid: v.hybrid,
        sliding_window: false,
    };
    let flow = connector_flow(&shape, v.p, v.d, profile).map_err(|e| format!("flow {e:?}"))?;
    let reads = outcome[1][0].as_array().unwrap();
    let notified = outcome[1][1].as_array().unwrap();
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
            };
            total += 1;
            if let Err(e) = compare(&v, &outcomes[code as usize], policy, profile) {
                bad += 1;
                if failures.len() < 30 {
                    failures.push(format!(
                        "nixl@{release} P{} D{} H{} mla={} hybrid={} pp {}x{} dp {}x{}: {e}",
                        v.p, v.d, v.h, v.mla, v.hybrid, v.ppp, v.dpp, v.pdp, v.ddp
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
    assert!(
        releases >= 35 && total > 50_000,
        "{releases} releases, {total} vectors"
    );
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
