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

use super::{resolve, ConnectorProfile, NixlHandshakeFailure, NixlHma, Rules};
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
    /// A Mamba-2 model's B/C groups (the data's 12th field; `None`: as many as units).
    groups: Option<i64>,
}

/// The B (= C) channels decode rank `r` of `d` holds, `[first, end)` of `groups ·
/// group_state`: its share where TP divides the groups, else (one group, replicated) its
/// head shard's group whole (`extra_groups_for_head_shards`, 0.20.0 `mamba_mixer2.py:299`).
fn bc_span(groups: i64, group_state: i64, d: i64, r: i64) -> (i64, i64) {
    if groups % d == 0 {
        let n = groups / d * group_state;
        (r * n, (r + 1) * n)
    } else {
        let first = r * groups / d * group_state;
        (first, first + group_state)
    }
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
        mamba_groups: v.groups,
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

/// The request the driver's block reads move (`block_read` of the data): its blocks per
/// attention group, the sliding windows (tokens) and the block size (tokens).
#[derive(Debug, Clone, Default)]
struct BlockRead {
    request_blocks: i64,
    windows: Vec<i64>,
    block_size: i64,
    /// State channels per B/C group of a Mamba-2 model with `groups` (the driver's
    /// `GROUP_STATE`; 0 in data without such vectors).
    group_state: i64,
}

impl BlockRead {
    fn of(data: &Value) -> BlockRead {
        let b = &data["block_read"];
        if b.is_null() {
            return BlockRead::default();
        }
        BlockRead {
            request_blocks: b["request_blocks"].as_i64().expect("request_blocks"),
            windows: ints(&b["windows"]),
            block_size: b["block_size"].as_i64().expect("block_size"),
            group_state: b["group_state"].as_i64().unwrap_or(0),
        }
    }
}

/// The driver's Mamba-2 state: x, B, C and SSM heads of `MAMBA_UNITS` units each.
const MAMBA_UNITS: i64 = 192;
const MAMBA_PARTS: [&str; 4] = ["x", "B", "C", "ssm"];

/// Every READ one decode rank posts for the request, per window: the blocks of each
/// KV-cache group it moves, against pdtp's transfer map (`sliding_window_blocks`): a full
/// attention group all of the request's blocks; a sliding-window group of its own (the
/// hybrid KV-cache manager, where pdtp's rule clips) the last `blocks(...)`; as many READs
/// as pdtp has sources.
#[allow(clippy::too_many_arguments)]
fn compare_blocks(
    r: usize,
    (model_sliding, groups, d): (bool, Option<i64>, i64),
    reads: &Value,
    sources: &[(i64, Vec<i64>)],
    state: &[(i64, (i64, i64, i64))],
    block: &BlockRead,
    profile: &ConnectorProfile,
) -> Result<(), String> {
    let rule = profile
        .rules
        .sliding_window_blocks()
        .ok_or("no sliding-window rule for NIXL")?;
    let per_window = reads.as_array().ok_or("block reads")?;
    // The driver reads with every window a sliding-window model, once (the first) others.
    let windows = &block.windows[..if model_sliding {
        block.windows.len()
    } else {
        1
    }];
    if per_window.len() != windows.len() {
        return Err(format!("{} windows recorded", per_window.len()));
    }
    let n = block.request_blocks;
    for (reads, &window) in per_window.iter().zip(windows) {
        let reads = reads.as_array().ok_or("reads")?;
        if reads.first().and_then(|x| x.as_str()) == Some("error") {
            return Err(format!(
                "decode rank {r}'s READ with a {window}-token window raises {reads:?}; pdtp \
                 accepts"
            ));
        }
        if reads.len() != sources.len() {
            return Err(format!(
                "decode rank {r} posts {} READs with a {window}-token window; pdtp reads {} \
                 prefill ranks",
                reads.len(),
                sources.len()
            ));
        }
        let tail = rule.blocks(window, block.block_size, n);
        for (i, read) in reads.iter().enumerate() {
            let read = read.as_array().ok_or("read")?;
            if let Some(wrong) = read.get(4) {
                // A block, head or Mamba unit copied into another's slot: wrong bytes.
                return Err(format!(
                    "decode rank {r}'s READ {i} puts bytes in the wrong slots: {wrong}; pdtp \
                     accepts"
                ));
            }
            let (q, heads) = &sources[i];
            let from = read[0].as_i64().unwrap_or(-1);
            // -1: a release with one remote handle per engine (0.11-0.13), one source.
            if (from >= 0 && from != *q) || ints(&read[2]) != *heads {
                return Err(format!(
                    "decode rank {r}'s READ {i} moves KV heads {} from prefill rank {from}; \
                     pdtp {heads:?} from {q}",
                    read[2]
                ));
            }
            // The Mamba state each READ moves (global units of x, B, C and SSM heads, of
            // `MAMBA_UNITS`) against the transfer map's slice.
            let parts = read[3].as_array().ok_or("state")?;
            let want = state.iter().find(|(s, _)| s == q).map(|x| x.1);
            match want {
                None if !parts.is_empty() => {
                    return Err(format!(
                        "decode rank {r}'s READ {i} moves Mamba state {}; pdtp none",
                        read[3]
                    ))
                }
                None => {}
                Some((start, end, of)) => {
                    let names: Vec<&str> = parts.iter().filter_map(|x| x[0].as_str()).collect();
                    if names != MAMBA_PARTS {
                        return Err(format!(
                            "decode rank {r}'s READ {i} moves Mamba parts {names:?}"
                        ));
                    }
                    for part in parts {
                        let (lo, hi) = (part[1].as_i64(), part[2].as_i64());
                        let exact = part.as_array().map(|a| a.len()) == Some(3);
                        let bc = matches!(part[0].as_str(), Some("B" | "C"));
                        // x and SSM heads: pdtp's TP shard of MAMBA_UNITS; B and C of a model
                        // with few groups: of `groups · group_state`, the decode rank's own
                        // replicated group where TP does not split them (P = D only: pdtp
                        // refuses P != D there).
                        let (got, want) = match groups {
                            Some(g) if bc && g % d != 0 => {
                                let (a, b) = bc_span(g, block.group_state, d, r as i64);
                                ((lo, hi), (Some(a), Some(b)))
                            }
                            Some(g) if bc => {
                                let total = g * block.group_state;
                                (
                                    (lo.map(|x| x * of), hi.map(|x| x * of)),
                                    (Some(start * total), Some(end * total)),
                                )
                            }
                            _ => (
                                (lo.map(|x| x * of), hi.map(|x| x * of)),
                                (Some(start * MAMBA_UNITS), Some(end * MAMBA_UNITS)),
                            ),
                        };
                        if !exact || got != want {
                            return Err(format!(
                                "decode rank {r}'s READ {i} moves Mamba {part} (of \
                                 {MAMBA_UNITS}) from prefill rank {q}; pdtp [{start}/{of}, \
                                 {end}/{of})"
                            ));
                        }
                    }
                }
            }
            let mut has_sliding_group = false;
            for group in read[1].as_array().ok_or("groups")? {
                let kind = group[0].as_str().unwrap_or("");
                // A read that brings no KV heads (a hybrid model's Mamba-only read: vLLM
                // empties its attention groups, `filter_block_ids_for_rank`) moves no
                // attention blocks.
                let kv = !heads.is_empty();
                let want: Vec<i64> = match kind {
                    "full" if kv => (0..n).collect(),
                    "sliding" if kv => {
                        has_sliding_group = true;
                        (n - tail..n).collect()
                    }
                    "full" => Vec::new(),
                    "sliding" => {
                        has_sliding_group = true;
                        Vec::new()
                    }
                    "mamba" => vec![0],
                    _ => {
                        return Err(format!(
                            "decode rank {r}'s READ puts blocks in other blocks' slots: {group}"
                        ))
                    }
                };
                if ints(&group[1]) != want {
                    return Err(format!(
                        "decode rank {r}'s READ moves blocks {} of the {kind} group with a \
                         {window}-token window; pdtp ({rule:?}) {want:?}",
                        group[1]
                    ));
                }
            }
            let clips = matches!(rule, crate::connector::SlidingBlocks::LastWindow);
            if model_sliding && has_sliding_group != clips {
                return Err(format!(
                    "decode rank {r}: sliding-window layers in a group of their own: \
                     {has_sliding_group}; pdtp clips them: {clips} ({rule:?})"
                ));
            }
        }
    }
    Ok(())
}

fn compare(
    v: &Vector,
    outcome: &Value,
    policy: &Value,
    profile: &ConnectorProfile,
) -> Result<(), String> {
    compare_with(v, outcome, policy, &BlockRead::default(), profile)
}

fn compare_with(
    v: &Vector,
    outcome: &Value,
    policy: &Value,
    block: &BlockRead,
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
    if let Some(x) = first.filter(|x| x.consequence == consequence::WRONG_BYTES) {
        // pdtp: broken, wrong bytes (vLLM raises nothing). The reads vLLM posts must move
        // some byte to another's slot, or leave part of a decode rank's state unwritten.
        return match wrong_state(v, outcome, block) {
            Some(_) => Ok(()),
            None => Err(format!(
                "vLLM moves every byte to its slot; pdtp says {} ({})",
                x.code, x.consequence
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
        mamba_groups: v.groups,
    };
    let flow = connector_flow(&shape, v.p, v.d, profile).map_err(|e| format!("flow {e:?}"))?;
    let reads = outcome[1][0].as_array().unwrap();
    let notified = outcome[1][1].as_array().unwrap();
    // The KV heads each read moves, decoded from its descriptors (hybrid models: by rank).
    let moved = outcome[1][2].as_array();
    // Sliding-window models: the blocks each READ moves, per window.
    let blocks = outcome[1].get(3);
    // (Data written before the driver ran block reads has none: `BlockRead::default()`.)
    if (v.sliding || v.hybrid) && blocks.is_none() && block.request_blocks > 0 {
        return Err("a sliding-window or hybrid vector without its block reads".into());
    }
    // pdtp's transfer map of the pair (the Mamba state each decode rank reads).
    let map = if blocks.is_some() {
        Some(
            crate::transfer::transfer_map_of(v.p, v.d, v.h, v.mla, (v.hybrid, v.sliding), profile)
                .map_err(|e| format!("transfer map {e:?}"))?,
        )
    } else {
        None
    };
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
        if let Some(blocks) = blocks {
            let state = map
                .as_ref()
                .map(|m| m.decode[r].mamba_state.clone())
                .unwrap_or_default();
            compare_blocks(
                r,
                (v.sliding, v.groups, v.d),
                &blocks[r],
                &f.sources,
                &state,
                block,
                profile,
            )?;
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
    // A hybrid model runs only with the conv-state layout vLLM's assert accepts (the
    // driver runs its flow so, as pdtp deploy sets it): pdtp says so where the release
    // asserts it (compared per release, `compare_conv_layout`).
    let warns = |code: &str| {
        report
            .warnings
            .iter()
            .any(|w| w.code == code && w.consequence == consequence::NEEDS_SETTING)
    };
    let asserts = matches!(&profile.rules, Rules::Nixl(r) if r.mamba_conv_layout.is_some());
    if warns("mamba_conv_state_layout") != (v.hybrid && asserts) {
        return Err(format!(
            "a hybrid model needs the DS conv-state layout here: {}; pdtp warns {:?}",
            v.hybrid && asserts,
            report.warnings
        ));
    }
    // The driver ran the vector with the hybrid KV-cache manager's flag where only the flag
    // keeps the manager on (`compare_hma` checks that per release): pdtp says so.
    let flagged = matches!(
        &profile.rules,
        Rules::Nixl(r) if matches!(r.hybrid_kv_manager, NixlHma::OffUnlessFlag(_))
    );
    if warns("hybrid_kv_cache_manager_off") != ((v.hybrid || v.sliding) && flagged) {
        return Err(format!(
            "the vector ran with {}: {}; pdtp warns {:?}",
            crate::check::HMA_FLAG,
            (v.hybrid || v.sliding) && flagged,
            report.warnings
        ));
    }
    let settings = report
        .warnings
        .iter()
        .filter(|w| w.consequence == consequence::NEEDS_SETTING)
        .count();
    if settings
        != usize::from(warns("mamba_conv_state_layout"))
            + usize::from(warns("hybrid_kv_cache_manager_off"))
    {
        return Err(format!("pdtp names other settings: {:?}", report.warnings));
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
    let mut stale: Vec<String> = Vec::new();
    for (release, file) in runs() {
        let data = cache.entry(file.clone()).or_insert_with(|| load(&file));
        let profile = resolve(&format!("nixl@{release}")).expect("nixl").profile;
        assert!(matches!(profile.rules, Rules::Nixl(_)));
        let outcomes = data["outcomes"].as_array().expect("outcomes");
        let codes = ints(&data["codes"]);
        let vectors = data["vectors"].as_array().expect("vectors");
        assert_eq!(codes.len(), vectors.len());
        let policy = &data["load_failure_policy"];
        let block = BlockRead::of(data);
        let mut bad = 0;
        if block.request_blocks == 0 {
            // Data from before the block reads: compared as it was recorded (ranks, heads).
            stale.push(release.clone());
        } else if let Err(e) = compare_conv_layout(&data["mamba_conv_layout"], profile) {
            bad += 1;
            failures.push(format!("nixl@{release}: {e}"));
        }
        if let Err(e) = compare_hma(&data["hybrid_kv_cache_manager"], profile) {
            bad += 1;
            failures.push(format!("nixl@{release}: {e}"));
        }
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
                groups: a.get(11).and_then(|x| x.as_i64()),
            };
            total += 1;
            let outcome = &outcomes[code as usize];
            *depth.entry(depth_of(&v, outcome)).or_insert(0u64) += 1;
            if let Err(e) = compare_with(&v, outcome, policy, &block, profile) {
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
    println!("flow nixl: releases whose data has no block reads: {stale:?}");
    assert!(
        releases >= 35 && total > 250_000,
        "{releases} releases, {total} vectors"
    );
    // Every TP-only vector vLLM runs is compared read by read: by KV heads, hybrid models
    // (whose Mamba descriptors the driver does not build) by rank.
    let at = |k: &str| depth.get(k).copied().unwrap_or(0);
    assert!(
        at("heads") > 50_000
            && at("heads, blocks and Mamba state (hybrid)") > 25_000
            && at("heads, blocks and Mamba state bytes (hybrid, B/C groups)") > 30_000
            && at("heads and blocks (sliding window)") > 16_000
            && at("ranks and heads (data before block reads)") == 0,
        "{depth:?}"
    );
}

/// A hybrid model's engine start with the conv-state layout at vLLM's default: the
/// release's worker assert (`mamba_conv_layout` of the data, run by the driver) against
/// pdtp's rule (`NixlRules::mamba_conv_layout`), and the setting pdtp names passes it.
fn compare_conv_layout(fact: &Value, profile: &ConnectorProfile) -> Result<(), String> {
    let Rules::Nixl(r) = &profile.rules else {
        return Err("not NIXL rules".into());
    };
    let (env, value) = crate::check::MAMBA_CONV_LAYOUT_ENV;
    let vllm = fact["error"].as_array().map(|e| {
        (
            e[0].as_str().unwrap_or("").to_string(),
            e[1].as_str().unwrap_or("").to_string(),
        )
    });
    match (vllm, r.mamba_conv_layout) {
        (None, None) => Ok(()),
        (Some((class, message)), Some(text)) if class == "AssertionError" && message == text => {
            let passes = fact["passes"].as_array().cloned().unwrap_or_default();
            if fact["env"] == env && passes.iter().any(|x| x == value) {
                Ok(())
            } else {
                Err(format!(
                    "pdtp names {env}={value}; vLLM's assert passes {fact}"
                ))
            }
        }
        (got, want) => Err(format!(
            "a hybrid model's engine start with the default conv layout: vLLM {got:?}; pdtp \
             {want:?}"
        )),
    }
}

/// The engine start's hybrid KV-cache manager with NIXL (`hybrid_kv_cache_manager` of the
/// data: the release's `VllmConfig.__post_init__` run at the default and with the flag, and
/// its spec unification with the manager off) against pdtp's row (`NixlRules::
/// hybrid_kv_manager`).
fn compare_hma(fact: &Value, profile: &ConnectorProfile) -> Result<(), String> {
    let Rules::Nixl(r) = &profile.rules else {
        return Err("not NIXL rules".into());
    };
    if fact.is_null() {
        return Err("no hybrid_kv_cache_manager fact in the data".into());
    }
    let on = |x: &Value| x.as_bool() == Some(true);
    let (default, flag) = (on(&fact["default"]), on(&fact["with_flag"]));
    let mamba = fact["mamba"].as_array().map(|e| {
        (
            e[0].as_str().unwrap_or("").to_string(),
            e[1].as_str().unwrap_or("").to_string(),
        )
    });
    let unified = fact["sliding"] == "unified";
    let refused =
        |m: &str| mamba.as_ref().map(|(c, t)| (c.as_str(), t.as_str())) == Some(("ValueError", m));
    let ok = match r.hybrid_kv_manager {
        NixlHma::On => default,
        NixlHma::OffUnlessFlag(m) => {
            !default && flag && refused(m) && unified && fact["flag"] == crate::check::HMA_FLAG
        }
        NixlHma::Off(m) => !default && !flag && refused(m) && unified,
    };
    // With the manager off every block of a sliding-window layer moves.
    let blocks_ok = default || flag || r.sliding_blocks == crate::connector::SlidingBlocks::Every;
    if ok && blocks_ok {
        Ok(())
    } else {
        Err(format!(
            "the hybrid KV-cache manager at engine start: vLLM {fact}; pdtp {:?} ({:?})",
            r.hybrid_kv_manager, r.sliding_blocks
        ))
    }
}

/// Where the reads of a vector vLLM runs move wrong Mamba bytes: a read with a byte in
/// another's slot (`misplaced`, decoded by the driver on both sides), or a decode rank whose
/// B or C channels (of `bc_span`) the reads do not all fill. `None`: every byte right.
fn wrong_state(v: &Vector, outcome: &Value, block: &BlockRead) -> Option<String> {
    let g = v.groups?;
    let per_rank = outcome[1].get(3)?.as_array()?;
    for (r, windows) in per_rank.iter().enumerate() {
        let reads = windows.as_array()?.first()?.as_array()?;
        let mut filled: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
        for read in reads {
            let read = read.as_array()?;
            if read.len() > 4 {
                return Some(format!("decode rank {r}: {}", read[4]));
            }
            for part in read[3].as_array()? {
                let name = part[0].as_str()?;
                if let (Some(lo), Some(hi)) = (part[1].as_i64(), part[2].as_i64()) {
                    filled.entry(name).or_default().push((lo, hi));
                }
            }
        }
        let want = bc_span(g, block.group_state, v.d, r as i64);
        for name in ["B", "C"] {
            let mut spans = filled.get(name).cloned().unwrap_or_default();
            spans.sort();
            let mut at = want.0;
            for (lo, hi) in spans {
                if lo <= at {
                    at = at.max(hi);
                }
            }
            if at < want.1 {
                return Some(format!(
                    "decode rank {r}: {name} [{at}, {}) never written",
                    want.1
                ));
            }
        }
    }
    None
}

/// How deep one vector is compared (what the driver recorded for it).
fn depth_of(v: &Vector, outcome: &Value) -> &'static str {
    if v.ppp > 1 || v.dpp > 1 {
        "engine start (PP)"
    } else if v.pdp > 1 || v.ddp > 1 {
        "ports and verdict (DP)"
    } else if outcome[0][0] != "ok" {
        "verdict (class, message, moment, fate)"
    } else if (v.hybrid || v.sliding) && outcome[1].get(3).is_none() {
        "ranks and heads (data before block reads)"
    } else if v.groups.is_some() {
        "heads, blocks and Mamba state bytes (hybrid, B/C groups)"
    } else if v.hybrid {
        "heads, blocks and Mamba state (hybrid)"
    } else if v.sliding {
        "heads and blocks (sliding window)"
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
            mamba_groups: None,
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
        mamba_groups: None,
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
    let at = vector_at(
        vectors,
        [2, 4, 8],
        |a| {
            !a[3].as_bool().unwrap()
                && !a[4].as_bool().unwrap()
                && !a[10].as_bool().unwrap()
                && a[9].as_i64().unwrap() == 192
        },
        "P2 D4 H8",
    );
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
        groups: None,
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

/// Which blocks of a sliding-window group a NIXL read moves is the schedulers' clip: every
/// block before 0.18.0 (no hybrid KV-cache manager; the worker's per-layer window is Llama
/// 4's chunked layers only, 0.17.0 `nixl_connector.py:1460`), the last
/// `cdiv(window, block_size) + 1` from 0.18.0 (`blocks_per_sw`, 0.18.0
/// `nixl_connector.py:606`, both in `request_finished` and `update_state_after_alloc`;
/// 0.33.0 `nixl/base_scheduler.py:151`). The transfer map says so for NIXL only.
#[test]
fn nixl_sliding_window_blocks_per_release() {
    use crate::connector::SlidingBlocks;
    use crate::transfer::transfer_map_of;
    let rule = |v: &str| {
        resolve(&format!("nixl@{v}"))
            .unwrap()
            .profile
            .rules
            .sliding_window_blocks()
    };
    assert_eq!(rule("0.17.1"), Some(SlidingBlocks::Every));
    for v in ["0.18.0", "0.24.0", "0.33.0"] {
        assert_eq!(rule(v), Some(SlidingBlocks::LastWindow), "{v}");
    }
    let tail = SlidingBlocks::LastWindow;
    // 6 blocks of 16 tokens: a 32-token window keeps 3, 40 keeps 4, 160 all 6.
    assert_eq!(tail.blocks(32, 16, 6), 3);
    assert_eq!(tail.blocks(40, 16, 6), 4);
    assert_eq!(tail.blocks(160, 16, 6), 6);
    assert_eq!(SlidingBlocks::Every.blocks(32, 16, 6), 6);
    let nixl = resolve("nixl@0.33.0").unwrap().profile;
    let m = transfer_map_of(4, 2, 8, false, (false, true), nixl).unwrap();
    assert_eq!(m.sliding_window_blocks, Some(tail));
    let moriio = resolve("moriio@0.33.0").unwrap().profile;
    let m = transfer_map_of(4, 4, 8, false, (false, false), moriio).unwrap();
    assert_eq!(m.sliding_window_blocks, None);
}

/// The block comparison can fail: a READ recorded as moving the whole sliding-window group
/// (as a release without the schedulers' clip would), or one READ short, disagrees with
/// pdtp; and pdtp's pre-0.18 rule (every block) disagrees with the newest release's reads.
#[test]
fn nixl_flow_block_comparison_fails_on_other_blocks() {
    let (release, data) = newest_with_block_reads();
    let profile = resolve(&format!("nixl@{release}")).unwrap().profile;
    let block = BlockRead::of(&data);
    assert_eq!(block.windows.first(), Some(&32));
    let vectors = data["vectors"].as_array().unwrap();
    let codes = ints(&data["codes"]);
    let at = vector_at(
        vectors,
        [4, 2, 8],
        |a| a[10].as_bool().unwrap(),
        "P4 D2 H8 with sliding-window layers",
    );
    let v = Vector {
        p: 4,
        d: 2,
        h: 8,
        mla: false,
        hybrid: false,
        ppp: 1,
        dpp: 1,
        pdp: 1,
        ddp: 1,
        a: 192,
        sliding: true,
        groups: None,
    };
    let outcome = data["outcomes"][codes[at] as usize].clone();
    let policy = &data["load_failure_policy"];
    assert_eq!(compare_with(&v, &outcome, policy, &block, profile), Ok(()));
    // Decode rank 0, window 32: two READs (prefill ranks 0 and 1), the last 3 blocks each.
    let first = &outcome[1][3][0][0];
    assert_eq!(first.as_array().unwrap().len(), 2);
    assert_eq!(first[0][1][1], serde_json::json!(["sliding", [3, 4, 5]]));
    let mut whole = outcome.clone();
    whole[1][3][0][0][0][1][1] = serde_json::json!(["sliding", [0, 1, 2, 3, 4, 5]]);
    let err = compare_with(&v, &whole, policy, &block, profile).unwrap_err();
    assert!(err.contains("moves blocks"), "{err}");
    let mut short = outcome.clone();
    short[1][3][0][0].as_array_mut().unwrap().pop();
    let err = compare_with(&v, &short, policy, &block, profile).unwrap_err();
    assert!(err.contains("posts 1 READs"), "{err}");
    let old = resolve("nixl@0.17.1").unwrap().profile;
    let sources = vec![(0, vec![0, 1]), (1, vec![2, 3])];
    let err = compare_blocks(
        0,
        (true, None, 2),
        &outcome[1][3][0],
        &sources,
        &[],
        &block,
        old,
    )
    .unwrap_err();
    assert!(err.contains("moves blocks"), "{err}");
}

/// A hybrid model's Mamba state over NIXL: each decode rank reads its own TP shard of every
/// part (conv x, B, C and the SSM heads), from the prefill ranks holding it — a slice of
/// one larger prefill shard where D > P, every smaller prefill shard of its group whole
/// where P > D (0.20.0 `nixl/worker.py:954` `_build_mamba_remote`, 0.20.0
/// `kv_connector/utils.py:733` `compute_split_handle_data`). The transfer map says so, and
/// the comparison fails on another slice or a misplaced unit.
#[test]
fn nixl_hybrid_mamba_state_slices() {
    use crate::transfer::transfer_map_of;
    let profile = resolve("nixl@0.33.0").unwrap().profile;
    let m = transfer_map_of(8, 2, 1, false, (true, false), profile).unwrap();
    assert_eq!(
        m.decode[1].mamba_state,
        vec![
            (4, (4, 5, 8)),
            (5, (5, 6, 8)),
            (6, (6, 7, 8)),
            (7, (7, 8, 8))
        ]
    );
    let m = transfer_map_of(2, 4, 8, false, (true, false), profile).unwrap();
    assert_eq!(m.decode[3].mamba_state, vec![(1, (3, 4, 4))]);
    // No Mamba layers, or another connector: no state.
    let m = transfer_map_of(2, 4, 8, false, (false, false), profile).unwrap();
    assert!(m.decode.iter().all(|r| r.mamba_state.is_empty()));
    let moriio = resolve("moriio@0.33.0").unwrap().profile;
    if let Ok(m) = transfer_map_of(4, 4, 8, false, (true, false), moriio) {
        assert!(m.decode.iter().all(|r| r.mamba_state.is_empty()));
    }

    let (release, data) = newest_with_block_reads();
    let profile = resolve(&format!("nixl@{release}")).unwrap().profile;
    let block = BlockRead::of(&data);
    let vectors = data["vectors"].as_array().unwrap();
    let codes = ints(&data["codes"]);
    let at = vector_at(
        vectors,
        [8, 2, 1],
        |a| a[4].as_bool().unwrap() && a[9].as_i64().unwrap() == 192,
        "a hybrid P8 D2 H1",
    );
    let v = Vector {
        p: 8,
        d: 2,
        h: 1,
        mla: false,
        hybrid: true,
        ppp: 1,
        dpp: 1,
        pdp: 1,
        ddp: 1,
        a: 192,
        sliding: false,
        groups: None,
    };
    let outcome = data["outcomes"][codes[at] as usize].clone();
    let policy = &data["load_failure_policy"];
    assert_eq!(compare_with(&v, &outcome, policy, &block, profile), Ok(()));
    // Decode rank 1's second READ: prefill rank 5's whole shard (units 120-144 of 192),
    // no KV heads (rank 4 sent head 0).
    let read = &outcome[1][3][1][0][1];
    assert_eq!(read[0], 5);
    assert_eq!(read[2], serde_json::json!([]));
    assert_eq!(read[3][0], serde_json::json!(["x", 120, 144]));
    let mut other = outcome.clone();
    other[1][3][1][0][1][3][0] = serde_json::json!(["x", 96, 120]);
    let err = compare_with(&v, &other, policy, &block, profile).unwrap_err();
    assert!(err.contains("moves Mamba"), "{err}");
    let mut wrong = outcome.clone();
    wrong[1][3][1][0][1]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!(["misplaced", [["ssm->x", 120, 121]]]));
    let err = compare_with(&v, &wrong, policy, &block, profile).unwrap_err();
    assert!(err.contains("wrong slots"), "{err}");
}
/// The index of the first recorded vector with prefill TP, decode TP and KV heads `pdh`
/// that also satisfies `more` (on its raw row), for the tests that drive one vector.
fn vector_at(
    vectors: &[Value],
    pdh: [i64; 3],
    more: impl Fn(&[Value]) -> bool,
    what: &str,
) -> usize {
    vectors
        .iter()
        .position(|v| {
            let a = v.as_array().unwrap();
            (0..3).all(|i| a[i].as_i64() == Some(pdh[i])) && more(a)
        })
        .unwrap_or_else(|| panic!("{what} in the grid"))
}

/// The newest release whose data has the block reads (sliding windows, Mamba state).
fn newest_with_block_reads() -> (String, Value) {
    runs()
        .into_iter()
        .rev()
        .map(|(release, file)| (release, load(&file)))
        .find(|(_, data)| BlockRead::of(data).request_blocks > 0)
        .expect("a release with block reads in the golden data")
}

/// The hybrid KV-cache manager at a NIXL engine start, per release range (the data's
/// `hybrid_kv_cache_manager`, the release's own `VllmConfig.__post_init__` and spec
/// unification, against the rows): off whatever the flags 0.11.0-0.17.x (0.17.1
/// `vllm/config/vllm.py:1184`; the factory refuses NixlConnector with the manager on, 0.17.1
/// `kv_connector/factory.py:58`), so a model with Mamba-type layers fails at engine start
/// (`unify_hybrid_kv_cache_specs`, 0.17.1 `vllm/v1/core/kv_cache_utils.py:1211`); off unless
/// `--no-disable-hybrid-kv-cache-manager` 0.18.0-0.21.x (0.18.0 `vllm/config/vllm.py:1163`);
/// on 0.22.0 on (0.22.0 `vllm/config/vllm.py:1440`, `supports_hma`). A wrong row fails.
#[test]
fn nixl_hybrid_kv_cache_manager_per_release() {
    let rule = |v: &str| match resolve(&format!("nixl@{v}")).unwrap().profile.rules {
        Rules::Nixl(r) => r.hybrid_kv_manager,
        _ => unreachable!(),
    };
    let text = super::MORIIO_HYBRID_CORE;
    for v in ["0.11.0", "0.13.0", "0.17.1"] {
        assert_eq!(rule(v), NixlHma::Off(text), "{v}");
    }
    for v in ["0.18.0", "0.19.1", "0.20.0", "0.21.0"] {
        assert_eq!(rule(v), NixlHma::OffUnlessFlag(text), "{v}");
    }
    for v in ["0.22.0", "0.22.1", "0.27.0", "0.33.0"] {
        assert_eq!(rule(v), NixlHma::On, "{v}");
    }
    // Each row against its release's fact, and against the others' facts (fails).
    let facts: BTreeMap<String, Value> = runs()
        .into_iter()
        .filter(|(v, _)| ["0.17.1", "0.18.0", "0.22.0"].contains(&v.as_str()))
        .map(|(v, f)| (v, load(&f)["hybrid_kv_cache_manager"].clone()))
        .collect();
    assert_eq!(facts.len(), 3);
    for (v, fact) in &facts {
        for w in facts.keys() {
            let profile = resolve(&format!("nixl@{w}")).unwrap().profile;
            assert_eq!(
                compare_hma(fact, profile).is_ok(),
                v == w,
                "{v} data, {w} rules"
            );
        }
    }
    // pdtp: a hybrid model refused at engine start before 0.18.0, with vLLM's text.
    let hybrid = Shape {
        num_attention_heads: 32,
        num_kv_heads: 4,
        is_mla: false,
        hybrid: true,
        sliding_window: false,
        mamba_groups: None,
    };
    let old = resolve("nixl@0.17.1").unwrap().profile;
    let x = connector_flow(&hybrid, 4, 4, old).unwrap_err();
    assert_eq!(
        (x.code, x.error, x.message.as_str(), x.when),
        (
            "hybrid_unsupported",
            VllmError::ValueError,
            text,
            Stage::EngineStart
        )
    );
}

/// A Mamba-2 model with one B/C group, which vLLM replicates over TP ranks (0.20.0
/// `mamba_mixer2.py:299-306`): NIXL's conv-state reads from 0.20.0 take B and C at offsets
/// that assume TP splits them (`remote_conv_offsets`, 0.20.0
/// `kv_connector/v1/ssm_conv_transfer_utils.py:60`; P > D `nixl/worker.py:975`): with P != D
/// the decode ranks' B/C slots get C or SSM bytes, or only part of their group. vLLM raises
/// nothing; pdtp refuses it as broken (wrong bytes). The data shows it, and the comparison
/// fails where the reads are made right.
#[test]
fn nixl_mamba_groups_replicated_wrong_bytes_from_020() {
    let shape = |g: Option<i64>| Shape {
        num_attention_heads: 192,
        num_kv_heads: 8,
        is_mla: false,
        hybrid: true,
        sliding_window: false,
        mamba_groups: g,
    };
    for v in ["0.20.0", "0.26.0", "0.33.0"] {
        let profile = resolve(&format!("nixl@{v}")).unwrap().profile;
        for (p, d) in [(1, 2), (2, 4), (4, 2), (8, 1)] {
            let x = connector_flow(&shape(Some(1)), p, d, profile).unwrap_err();
            assert_eq!(
                (x.code, x.error, x.consequence),
                (
                    "mamba_groups_replicated",
                    VllmError::None,
                    consequence::WRONG_BYTES
                ),
                "{v} P{p} D{d}"
            );
        }
        // Equal TP, groups TP splits, or unknown groups: runs.
        assert!(connector_flow(&shape(Some(1)), 4, 4, profile).is_ok());
        assert!(connector_flow(&shape(Some(4)), 1, 4, profile).is_ok());
        assert!(connector_flow(&shape(Some(4)), 4, 2, profile).is_ok());
        assert!(connector_flow(&shape(None), 2, 4, profile).is_ok());
    }
    // 0.18.0-0.19.x need equal TP for any Mamba model (their own assert comes first).
    let old = resolve("nixl@0.19.1").unwrap().profile;
    let x = connector_flow(&shape(Some(1)), 2, 4, old).unwrap_err();
    assert_eq!(x.code, "mamba_heterogeneous_tp");

    let (release, data) = newest_with_block_reads();
    let profile = resolve(&format!("nixl@{release}")).unwrap().profile;
    let block = BlockRead::of(&data);
    let vectors = data["vectors"].as_array().unwrap();
    let codes = ints(&data["codes"]);
    let find = |p: i64, d: i64| {
        let at = vector_at(
            vectors,
            [p, d, 8],
            |a| a.get(11).and_then(|x| x.as_i64()) == Some(1) && a[9].as_i64().unwrap() == 192,
            "a one-group Mamba-2 vector",
        );
        let v = Vector {
            p,
            d,
            h: 8,
            mla: false,
            hybrid: true,
            ppp: 1,
            dpp: 1,
            pdp: 1,
            ddp: 1,
            a: 192,
            sliding: false,
            groups: Some(1),
        };
        (v, data["outcomes"][codes[at] as usize].clone())
    };
    let policy = &data["load_failure_policy"];
    // D > P: decode rank 0's C slot holds SSM bytes (misplaced, decoded by the driver).
    let (v, outcome) = find(1, 2);
    assert_eq!(outcome[0][0], "ok", "vLLM raises nothing");
    assert_eq!(compare_with(&v, &outcome, policy, &block, profile), Ok(()));
    let read = outcome[1][3][0][0][0].as_array().unwrap().clone();
    assert_eq!(read[4][0], "misplaced", "{read:?}");
    // The same reads made right (no misplaced unit): pdtp's "broken" disagrees.
    let mut right = outcome.clone();
    for r in 0..2 {
        for read in right[1][3][r][0].as_array_mut().unwrap() {
            let read = read.as_array_mut().unwrap();
            read.truncate(4);
            let (lo, hi) = bc_span(1, block.group_state, 2, r as i64);
            read[3] = serde_json::json!([
                ["x", r * 96, (r + 1) * 96],
                ["B", lo, hi],
                ["C", lo, hi],
                ["ssm", r * 96, (r + 1) * 96]
            ]);
        }
    }
    let err = compare_with(&v, &right, policy, &block, profile).unwrap_err();
    assert!(err.contains("every byte"), "{err}");
    // P > D = 1: each prefill rank's B read is the first 1/P of its replica, laid side by
    // side: the decode rank's B holds the group's first channels P times (misplaced).
    let (v, outcome) = find(8, 1);
    assert_eq!(outcome[0][0], "ok");
    assert!(wrong_state(&v, &outcome, &block).is_some_and(|w| w.contains("misplaced")));
    assert_eq!(compare_with(&v, &outcome, policy, &block, profile), Ok(()));
    // Equal TP: every byte in place, compared part by part (the group replicated on each).
    let (v, outcome) = find(4, 4);
    assert_eq!(wrong_state(&v, &outcome, &block), None);
    assert_eq!(compare_with(&v, &outcome, policy, &block, profile), Ok(()));
    // Reads that leave a rank's C unwritten are wrong bytes too.
    let mut short = outcome.clone();
    short[1][3][0][0][0][3]
        .as_array_mut()
        .unwrap()
        .retain(|p| p[0] != "C");
    assert!(wrong_state(&v, &short, &block).is_some_and(|w| w.contains("never written")));
}
