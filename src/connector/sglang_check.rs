//! SGLang through the seam: `check`'s verdict for an `sglang-*` connector (resolved by the
//! registry like any connector) against the verdict SGLang's own recorded behaviour implies.
//!
//! The expected verdict is composed from the golden data alone (`tests/data/sglang_golden.
//! json.gz`: each decode rank's reads or exception, each head slice SGLang computed), never
//! from pdtp's rules: a rank that raises or fails its request, a slice that raises or copies
//! whole blocks, heads that land wrong, or a prefill rank no decode rank joins.

use serde_json::Value;

use super::sglang::{SliceOutcome, SGLANG_RELEASES};
use super::sglang_golden::{golden, int, recorded_rank, recorded_slice};
use super::{resolve, sglang::RankOutcome};
use crate::check::{connector_flow, consequence, Shape};

/// The verdict's kind: `ok`, `hangs`, `corrupts`, or `raises <class>`.
fn recorded_verdict(case: &Value, h: i64) -> Option<String> {
    let (p, d) = (int(&case["p"]), int(&case["d"]));
    let mla = case["mla"].as_bool().expect("mla");
    let ranks = case["ranks"].as_array().expect("ranks");
    let mut contacted = vec![false; p as usize];
    let mut reads = Vec::new();
    for (rank, rec) in ranks.iter().enumerate() {
        match recorded_rank(rec) {
            RankOutcome::Raises(class, _) => return Some(format!("raises {class}")),
            RankOutcome::Fails(_) => return Some("raises KVTransferError".into()),
            RankOutcome::Reads(t) => {
                for (src, dummy) in t {
                    contacted[src as usize] = true;
                    if !dummy {
                        reads.push((src, rank as i64));
                    }
                }
            }
        }
    }
    if !mla && p != d {
        let pairs = case["heads"].get(h.to_string())?.as_array()?;
        let mut filled: Vec<Vec<Option<i64>>> = (0..d)
            .map(|r| vec![None; crate::rules::kv_heads_of_rank(h, d, r, false).len()])
            .collect();
        for (src, dst) in reads {
            let pair = pairs
                .iter()
                .find(|x| int(&x[0]) == src && int(&x[1]) == dst)?;
            let theirs = crate::rules::kv_heads_of_rank(h, p, src, false);
            match recorded_slice(&pair[2]) {
                SliceOutcome::Whole => return Some("corrupts".into()),
                SliceOutcome::Raises(class, _) => return Some(format!("raises {class}")),
                // NIXL's prepared source list must tile the rank's heads (`num_groups · n`);
                // where it does not and SGLang asserts nothing, NIXL refuses the descriptors.
                SliceOutcome::Heads(_, n, _)
                    if pair[2]
                        .get("groups")
                        .is_some_and(|g| int(g) * n != (h / p).max(1)) =>
                {
                    return Some("raises nixlNotFoundError".into());
                }
                SliceOutcome::Heads(s, n, t) => {
                    let slot = &mut filled[dst as usize];
                    for i in 0..n {
                        let (from, to) = (s + i, t + i);
                        if from < 0
                            || from >= theirs.len() as i64
                            || to < 0
                            || to >= slot.len() as i64
                        {
                            return Some("corrupts".into());
                        }
                        slot[to as usize] = Some(theirs[from as usize]);
                    }
                }
            }
        }
        for (r, slot) in filled.iter().enumerate() {
            let want = crate::rules::kv_heads_of_rank(h, d, r as i64, false);
            if slot.iter().zip(&want).any(|(g, w)| *g != Some(*w)) {
                return Some("corrupts".into());
            }
        }
    }
    if contacted.contains(&false) {
        return Some("hangs".into());
    }
    Some("ok".into())
}

fn checked_verdict(key: &str, case: &Value, h: i64) -> String {
    let resolved = resolve(key).unwrap_or_else(|e| panic!("{key}: {e}"));
    let shape = Shape {
        num_attention_heads: 64,
        num_kv_heads: h,
        is_mla: case["mla"].as_bool().expect("mla"),
        hybrid: false,
        sliding_window: false,
        mamba_groups: None,
    };
    match connector_flow(&shape, int(&case["p"]), int(&case["d"]), resolved.profile) {
        Ok(_) => "ok".into(),
        Err(v) if v.consequence == consequence::HANG => "hangs".into(),
        Err(v) if v.consequence == consequence::WRONG_BYTES => "corrupts".into(),
        Err(v) => format!("raises {}", v.error.name()),
    }
}

#[test]
fn check_gives_the_verdict_sglang_behaviour_implies() {
    let doc = golden();
    let (mut compared, mut kinds) = (0, std::collections::BTreeSet::new());
    let mut wrong = Vec::new();
    for (backend, runs) in doc["backends"].as_object().expect("backends") {
        for run in runs.as_array().expect("runs") {
            // Every run's first and last release: a sample that covers every rules row.
            let releases = run["releases"].as_array().expect("releases");
            for release in [&releases[0], &releases[releases.len() - 1]] {
                let key = format!("sglang-{backend}@{}", release.as_str().expect("release"));
                for case in run["data"]["cases"].as_array().expect("cases") {
                    if int(&case["dp"]) != 1 || case["pp"] != serde_json::json!([1, 1]) {
                        continue;
                    }
                    let heads: Vec<i64> = match case.get("heads").and_then(|h| h.as_object()) {
                        Some(m) => m.keys().map(|k| k.parse().expect("heads")).collect(),
                        None => vec![8],
                    };
                    for h in heads {
                        let Some(want) = recorded_verdict(case, h) else {
                            continue;
                        };
                        let got = checked_verdict(&key, case, h);
                        compared += 1;
                        kinds.insert(want.clone());
                        if want != got {
                            wrong.push(format!(
                                "{key} P={} D={} mla={} H={h}: SGLang {want}, check {got}",
                                case["p"], case["d"], case["mla"]
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(compared > 1000, "{compared} vectors compared");
    // The sample holds every kind of verdict, so a check that says `ok` always fails here.
    for kind in ["ok", "hangs", "corrupts", "raises AssertionError"] {
        assert!(kinds.contains(kind), "no {kind} in the sample: {kinds:?}");
    }
    assert!(
        wrong.is_empty(),
        "{} of {compared} disagree:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(20)].join("\n")
    );
    assert!(SGLANG_RELEASES.len() > 60);
}

#[test]
fn sglang_connectors_resolve_through_the_registry() {
    let r = resolve("sglang-nixl@0.5.10.post1").unwrap();
    assert_eq!(r.key(), "sglang-nixl@0.5.10.post1");
    assert_eq!(r.connector.engine.name(), "sglang");
    let e = resolve("sglang-mori@0.5.8").unwrap_err().to_string();
    assert!(e.starts_with("sglang_version=0.5.8"), "{e}");
    assert!(e.contains("SGLang 0.5.9 to 0.5.23"), "{e}");
    // vLLM keys are unchanged.
    assert_eq!(resolve("nixl").unwrap().key(), "nixl@0.33.0");
    let mori = super::connector("sglang-mori").unwrap();
    let refused = crate::check::gpu_violation(mori, "NVIDIA").expect("MORI refused on NVIDIA");
    assert_eq!(refused.code, "connector_needs_amd_gpu");
    assert!(crate::check::gpu_violation(mori, "AMD").is_none());
    let nixl = super::connector("sglang-nixl").unwrap();
    assert!(crate::check::gpu_violation(nixl, "NVIDIA").is_none());
}
