//! pdtp's SGLang rules against SGLang's own code, release by release.
//!
//! `tools/sglang_golden.py` runs each release's rank mapping, bootstrap lookups and head-slice
//! code (extracted from its wheel) over a grid and writes `tests/data/sglang_golden.json.gz`:
//! per backend, runs of releases with identical outcomes. This test resolves
//! `sglang-<backend>@<release>` for every release of every run the way users do and compares
//! every recorded fact: each decode rank's reads (rank, dummy) or its exception (class, text)
//! or its failed request's text, every head slice (offsets or exception), where a slice
//! exception surfaces, and whether the release times out an unjoined bootstrap room.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;

use flate2::read::GzDecoder;
use serde_json::Value;

use super::sglang::{
    head_slice, kv_settings_outcome, prepared_groups, rank_outcome, resolve_sglang, RankOutcome,
    SglangRules, SliceOutcome, SliceSurface, SGLANG_RELEASES,
};

pub(super) fn golden() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/sglang_golden.json.gz");
    let mut text = String::new();
    GzDecoder::new(File::open(path).expect("sglang golden file"))
        .read_to_string(&mut text)
        .expect("gzip");
    serde_json::from_str(&text).expect("json")
}

pub(super) fn int(v: &Value) -> i64 {
    v.as_i64().expect("int")
}

pub(super) fn s(v: &Value) -> String {
    v.as_str().expect("string").to_string()
}

/// SGLang's recorded rank outcome in pdtp's terms.
pub(super) fn recorded_rank(v: &Value) -> RankOutcome {
    if let Some(e) = v.get("error") {
        return RankOutcome::Raises(Box::leak(s(&e[0]).into_boxed_str()), s(&e[1]));
    }
    if let Some(f) = v.get("failed") {
        return RankOutcome::Fails(s(f));
    }
    RankOutcome::Reads(
        v["reads"]
            .as_array()
            .expect("reads")
            .iter()
            .map(|r| (int(&r[0]), r[1].as_bool().expect("dummy")))
            .collect(),
    )
}

pub(super) fn recorded_slice(v: &Value) -> SliceOutcome {
    // An early `return -1` of the slice code (Mooncake's slot-size check) fails the transfer;
    // no case of the grid reaches one, and a rule for it is written when one does.
    assert!(
        v.get("fails").is_none(),
        "a slice check fails the transfer: {v}"
    );
    if v.get("whole").is_some() {
        return SliceOutcome::Whole;
    }
    if let Some(e) = v.get("error") {
        return SliceOutcome::Raises(
            Box::leak(s(&e[0]).into_boxed_str()),
            Box::leak(s(&e[1]).into_boxed_str()),
        );
    }
    SliceOutcome::Heads(int(&v["src"]), int(&v["n"]), int(&v["dst"]))
}

fn surface(v: &Value) -> Option<SliceSurface> {
    if v.is_null() {
        return None;
    }
    Some(
        match (
            v["caller"].as_str().expect("caller"),
            v["caught"].as_bool().expect("caught"),
        ) {
            (_, true) => SliceSurface::RequestFails,
            ("_do_staging_transfer", false) => SliceSurface::TransferThread,
            _ => SliceSurface::PrefillScheduler,
        },
    )
}

/// Every disagreement between `rules` and one run's data (at most a few per kind).
fn disagreements(rules: &SglangRules, data: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for case in data["cases"].as_array().expect("cases") {
        let (p, d) = (int(&case["p"]), int(&case["d"]));
        let mla = case["mla"].as_bool().expect("mla");
        let (ppp, dpp) = (int(&case["pp"][0]), int(&case["pp"][1]));
        let pp_grid = (ppp, dpp) != (1, 1);
        for (rank, rec) in case["ranks"].as_array().expect("ranks").iter().enumerate() {
            let want = recorded_rank(rec);
            let got = rank_outcome(rules, p, d, mla, rank as i64, int(&case["dp"]), ppp, dpp);
            // Without its PP assert SGLang reads one entry per prefill stage: only whether it
            // raises is a rule there (pdtp plans PP on neither side of an SGLang pair).
            let same = if pp_grid {
                match (&want, &got) {
                    (RankOutcome::Raises(..), _) => want == got,
                    (_, RankOutcome::Raises(..)) => false,
                    _ => true,
                }
            } else {
                want == got
            };
            if !same {
                out.push(format!(
                    "P={p} D={d} mla={mla} dp={} pp={ppp}/{dpp} rank {rank}: SGLang {want:?}, \
                     pdtp {got:?}",
                    case["dp"]
                ));
            }
        }
        if let Some(heads) = case.get("heads").and_then(|h| h.as_object()) {
            for (h, pairs) in heads {
                let h: i64 = h.parse().expect("heads");
                for pair in pairs.as_array().expect("pairs") {
                    let (src, dst) = (int(&pair[0]), int(&pair[1]));
                    let want = recorded_slice(&pair[2]);
                    let got = head_slice(rules, p, d, h, src, dst);
                    if want != got {
                        out.push(format!(
                            "P={p} D={d} H={h} {src}->{dst}: SGLang {want:?}, pdtp {got:?}"
                        ));
                    }
                    // NIXL's prepared path: the number of head groups its source list holds.
                    if matches!(want, SliceOutcome::Heads(..)) {
                        let want = pair[2].get("groups").map(int);
                        let got = prepared_groups(rules, p, d, h);
                        if want != got {
                            out.push(format!(
                                "P={p} D={d} H={h} {src}->{dst}: SGLang num_groups {want:?}, \
                                 pdtp {got:?}"
                            ));
                        }
                    }
                }
            }
        }
    }
    // `--page-size` / `--kv-cache-dtype` of the two instances: SGLang's exception, or none.
    for case in data["settings"].as_array().expect("settings") {
        let page = (int(&case["page"][0]), int(&case["page"][1]));
        let dtype = (
            case["dtype"][0].as_str().expect("dtype"),
            case["dtype"][1].as_str().expect("dtype"),
        );
        let want = case.get("error").map(|e| (s(&e[0]), s(&e[1])));
        let got = kv_settings_outcome(rules, page, dtype)
            .err()
            .map(|(c, t)| (c.to_string(), t));
        if want != got {
            out.push(format!(
                "page {page:?} dtype {dtype:?}: SGLang {want:?}, pdtp {got:?}"
            ));
        }
    }
    if let Some(want) = surface(&data["slice_surface"]) {
        if want != rules.slice_surface {
            out.push(format!(
                "slice surface: SGLang {want:?}, pdtp {:?}",
                rules.slice_surface
            ));
        }
    }
    if data["bootstrap_timeout"].as_bool() != Some(rules.bootstrap_timeout) {
        out.push(format!(
            "bootstrap timeout: SGLang {}, pdtp {}",
            data["bootstrap_timeout"], rules.bootstrap_timeout
        ));
    }
    out
}

#[test]
fn every_release_and_backend_agrees_with_sglang() {
    let doc = golden();
    let covered: Vec<String> = doc["releases"]
        .as_array()
        .expect("releases")
        .iter()
        .map(s)
        .collect();
    assert_eq!(
        covered, SGLANG_RELEASES,
        "the golden data covers every release pdtp lists"
    );
    let mut total = Vec::new();
    let mut checked = 0;
    for (backend, runs) in doc["backends"].as_object().expect("backends") {
        for run in runs.as_array().expect("runs") {
            for release in run["releases"].as_array().expect("releases") {
                let key = format!("sglang-{backend}@{}", s(release));
                let resolved = resolve_sglang(&key).unwrap_or_else(|e| panic!("{key}: {e}"));
                let bad = disagreements(&resolved.profile.rules, &run["data"]);
                checked += 1;
                total.extend(bad.into_iter().take(5).map(|b| format!("{key}: {b}")));
            }
        }
    }
    assert!(
        checked >= 3 * 15 + 2 * 40,
        "{checked} (backend, release) pairs checked"
    );
    assert!(
        total.is_empty(),
        "{} disagreements:\n{}",
        total.len(),
        total.join("\n")
    );
}

#[test]
fn a_backend_is_refused_before_its_first_release() {
    // MORI first ships in 0.5.9: the golden data has no MORI run before it.
    let doc = golden();
    let first = &doc["backends"]["mori"][0]["releases"][0];
    assert_eq!(first.as_str(), Some("0.5.9"));
    assert!(resolve_sglang("sglang-mori@0.5.8").is_err());
}
