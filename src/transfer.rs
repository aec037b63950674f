//! Who reads from whom: for each decode rank the prefill rank(s) it takes KV from and the KV
//! heads it receives from each, and the prefill ranks it releases; for each prefill rank the
//! heads it holds, the decode ranks that take its KV, the ranks that release it and the
//! release acks it waits for. Built from the connector's flow for the vLLM release
//! (`check::connector_flow`), so it is what that release does.

use crate::check::{check_pair, connector_flow, Shape, Violation};
use crate::connector::{ConnectorProfile, SlidingBlocks};
use crate::rules;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeRankMap {
    pub rank: i64,
    /// KV-head indices this decode rank holds (MLA: `[0]`, the whole latent).
    pub heads: Vec<i64>,
    /// (prefill rank, heads received from it), in read order.
    pub sources: Vec<(i64, Vec<i64>)>,
    /// Prefill ranks this decode rank releases once it has the KV.
    pub releases: Vec<i64>,
    /// Where vLLM varies the source per request: the prefill ranks it rotates over
    /// (round-robin); `sources`/`releases` are then the first request's.
    pub rotates: Vec<i64>,
    /// A hybrid model's Mamba state (conv sub-projections and SSM heads, each split over
    /// TP) read from each prefill rank: `(prefill rank, (start, end, of))`, the slice
    /// `[start/of, end/of)` of every part; empty where the model has no Mamba layers or
    /// pdtp's rules for the connector do not say.
    pub mamba_state: Vec<(i64, (i64, i64, i64))>,
}

/// The slice of a hybrid model's Mamba state decode rank `r` of `d` reads from prefill
/// rank `q` of `p` (one TP size divides the other): where their TP shards overlap, in
/// units of `1 / max(p, d)`. NIXL reads exactly that (its conv sub-projection and SSM
/// descriptors, 0.20.0 `nixl/worker.py:954` `_build_mamba_remote`: a decode rank's own
/// slice of a larger prefill shard, or each smaller prefill shard whole into its place,
/// `compute_split_handle_data`, 0.20.0 `kv_connector/utils.py:733`).
pub fn mamba_state_slice(p: i64, d: i64, r: i64, q: i64) -> (i64, i64, i64) {
    let of = p.max(d);
    let (rs, re) = (r * of / d, (r + 1) * of / d);
    let (qs, qe) = (q * of / p, (q + 1) * of / p);
    (rs.max(qs), re.min(qe), of)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefillRankMap {
    pub rank: i64,
    pub heads: Vec<i64>,
    /// Decode ranks that take KV from this rank (read it, or are written by it).
    pub readers: Vec<i64>,
    /// Decode ranks that release this rank (empty in MoRIIO WRITE mode, where the decode
    /// scheduler releases every prefill rank itself).
    pub released_by: Vec<i64>,
    /// Release acks this rank waits for before freeing a request's blocks.
    pub expected_acks: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferMap {
    pub decode: Vec<DecodeRankMap>,
    pub prefill: Vec<PrefillRankMap>,
    /// A model with sliding-window layers under MoRIIO READ or NIXL: which of a request's blocks the
    /// transfer moves for them ([`SlidingBlocks::blocks`]); `None` for a model without them
    /// and for the connectors whose windows pdtp's flow data does not compare.
    pub sliding_window_blocks: Option<SlidingBlocks>,
}

/// Largest TP size `transfer_map` lays out rank by rank (the output grows as P + D).
pub const MAX_MAP_TP: i64 = 1 << 16;

/// Build the map for a valid pair; an invalid pair returns the first violation vLLM would
/// raise (or pdtp's, where vLLM raises nothing but the pair cannot work). Attention-head
/// divisibility is not checked here (the map only needs KV heads).
pub fn transfer_map(
    p: i64,
    d: i64,
    kv_heads: i64,
    is_mla: bool,
    profile: &ConnectorProfile,
) -> Result<TransferMap, Violation> {
    transfer_map_of(p, d, kv_heads, is_mla, (false, false), profile)
}

/// [`transfer_map`] of a model with Mamba-type and/or sliding-window layers
/// (`(hybrid, sliding_window)`, as [`Shape`] names them): the connector's rules for them.
pub fn transfer_map_of(
    p: i64,
    d: i64,
    kv_heads: i64,
    is_mla: bool,
    (hybrid, sliding_window): (bool, bool),
    profile: &ConnectorProfile,
) -> Result<TransferMap, Violation> {
    // Attention heads = a stand-in that always divides: P·D is a multiple of both.
    let shape = Shape {
        num_attention_heads: p.saturating_mul(d),
        num_kv_heads: kv_heads,
        is_mla,
        hybrid,
        sliding_window,
        mamba_groups: None,
    };
    let report = check_pair(&shape, p, d, profile, None);
    if let Some(first) = report.violations.into_iter().next() {
        return Err(first);
    }
    let flow = connector_flow(&shape, p, d, profile)?;
    let mut readers: Vec<Vec<i64>> = vec![Vec::new(); p as usize];
    let mut released_by: Vec<Vec<i64>> = vec![Vec::new(); p as usize];
    let decode = flow
        .decode
        .into_iter()
        .enumerate()
        .map(|(r, f)| {
            let r = r as i64;
            for (src, _) in &f.sources {
                readers[*src as usize].push(r);
            }
            for q in &f.releases {
                released_by[*q as usize].push(r);
            }
            // NIXL's rows that move Mamba state (0.18.0 on; before, the worker registers
            // none).
            let nixl = matches!(profile.rules, crate::connector::Rules::Nixl(n)
                if n.mamba_same_tp || n.mamba_reads_every_rank);
            let mamba_state = if hybrid && nixl {
                // NIXL's rows: every source moves its overlap of the Mamba state.
                f.sources
                    .iter()
                    .map(|(q, _)| (*q, mamba_state_slice(p, d, r, *q)))
                    .collect()
            } else {
                Vec::new()
            };
            DecodeRankMap {
                rank: r,
                mamba_state,
                heads: rules::kv_heads_of_rank(kv_heads, d, r, is_mla),
                sources: f.sources,
                releases: f.releases,
                rotates: f.rotates,
            }
        })
        .collect();
    let prefill = readers
        .into_iter()
        .zip(released_by)
        .enumerate()
        .map(|(r, (readers, released_by))| PrefillRankMap {
            rank: r as i64,
            heads: rules::kv_heads_of_rank(kv_heads, p, r as i64, is_mla),
            readers,
            released_by,
            expected_acks: flow.expected_acks,
        })
        .collect();
    // The rule only where the model has sliding-window layers (one group otherwise).
    let sliding_window_blocks = if sliding_window {
        profile.rules.sliding_window_blocks()
    } else {
        None
    };
    Ok(TransferMap {
        decode,
        prefill,
        sliding_window_blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::profile;

    #[test]
    fn moriio_read_sliding_window_blocks_per_release() {
        use crate::connector::SlidingBlocks;
        let map = |key: &str, sliding: bool| {
            transfer_map_of(2, 2, 8, false, (false, sliding), profile(key).unwrap())
                .unwrap()
                .sliding_window_blocks
        };
        // 0.30.0 `moriio_connector.py:441`: the window's group moves its last
        // cdiv(window, block) + 1 blocks; before, one unified group moves every block.
        assert_eq!(map("moriio@0.33.0", true), Some(SlidingBlocks::LastWindow));
        assert_eq!(map("moriio@0.30.0", true), Some(SlidingBlocks::LastWindow));
        assert_eq!(map("moriio@0.29.0", true), Some(SlidingBlocks::Every));
        assert_eq!(map("moriio@0.33.0", false), None);
        assert_eq!(map("nixl@0.33.0", true), Some(SlidingBlocks::LastWindow));
        assert_eq!(SlidingBlocks::LastWindow.blocks(4096, 16, 300), 257);
        assert_eq!(SlidingBlocks::LastWindow.blocks(4096, 16, 200), 200);
        assert_eq!(SlidingBlocks::LastWindow.blocks(100, 16, 300), 8);
        assert_eq!(SlidingBlocks::Every.blocks(4096, 16, 300), 300);
    }

    #[test]
    fn moriio_d8_reads_p4() {
        let m = transfer_map(4, 8, 4, false, profile("moriio").unwrap()).unwrap();
        let reads: Vec<i64> = m.decode.iter().map(|x| x.sources[0].0).collect();
        assert_eq!(reads, [0, 0, 1, 1, 2, 2, 3, 3]);
        assert!(m
            .prefill
            .iter()
            .all(|p| p.expected_acks == 2 && p.readers.len() == 2));
    }

    #[test]
    fn moriio_d4_reads_p8_releases_per_release() {
        let m = transfer_map(8, 4, 4, false, profile("moriio@0.32.0").unwrap()).unwrap();
        let reads: Vec<i64> = m.decode.iter().map(|x| x.sources[0].0).collect();
        assert_eq!(reads, [0, 2, 4, 6]);
        assert!(m.prefill[1].readers.is_empty() && m.prefill[1].released_by.is_empty());
        // 0.33.0 releases every holder, read or not.
        let m = transfer_map(8, 4, 4, false, profile("moriio").unwrap()).unwrap();
        assert_eq!(m.decode[0].releases, [0, 1]);
        assert_eq!(m.prefill[1].released_by, [0]);
    }

    /// rules.md §4 restated independently: the heads rank `r` of `tp` holds.
    fn held(h: i64, tp: i64, r: i64, mla: bool) -> Vec<i64> {
        if mla {
            vec![0]
        } else if tp <= h {
            (r * (h / tp)..(r + 1) * (h / tp)).collect()
        } else {
            vec![r / (tp / h)]
        }
    }

    /// Every pair P, D in 1..=64 and every KV-head count 1..=128, MLA or not, every
    /// connector profile: each decode rank receives exactly the heads it holds, once each,
    /// from ranks that hold them; READ acks equal `expected_ack_count`; MoRIIO READ reads
    /// `remote_tp_rank` (from 0.25.0) and every reader releases what it read.
    #[test]
    fn exhaustive_map_properties() {
        use crate::connector::{Dial, Rules};
        let mut valid = 0;
        for prof in crate::connector::PROFILES {
            let read_dial = match prof.rules {
                Rules::MoriioRead(r) => Some(r.dial),
                _ => None,
            };
            for p in 1..=64 {
                for d in 1..=64 {
                    for h in 1..=128 {
                        for mla in [false, true] {
                            let Ok(m) = transfer_map(p, d, h, mla, prof) else {
                                continue;
                            };
                            valid += 1;
                            let mut readers = vec![Vec::new(); p as usize];
                            for dr in &m.decode {
                                assert_eq!(dr.heads, held(h, d, dr.rank, mla));
                                let mut got: Vec<i64> = Vec::new();
                                for (src, heads) in &dr.sources {
                                    let theirs = held(h, p, *src, mla);
                                    assert!(heads.iter().all(|x| theirs.contains(x)));
                                    got.extend(heads);
                                    readers[*src as usize].push(dr.rank);
                                }
                                got.sort_unstable();
                                assert_eq!(
                                    got, dr.heads,
                                    "{} P{p} D{d} H{h} {mla}",
                                    prof.connector
                                );
                                if let Some(dial) = read_dial {
                                    let want = match dial {
                                        Dial::RemoteTpRank => {
                                            rules::remote_tp_rank(dr.rank, d, p).unwrap()
                                        }
                                        Dial::SameRank => dr.rank,
                                    };
                                    assert_eq!(dr.sources.len(), 1);
                                    assert_eq!(dr.sources[0].0, want);
                                    assert!(dr.releases.contains(&want));
                                }
                            }
                            for pr in &m.prefill {
                                assert_eq!(pr.readers, readers[pr.rank as usize]);
                                if read_dial == Some(Dial::RemoteTpRank) {
                                    let acks = rules::expected_ack_count(p, d).unwrap();
                                    assert_eq!(pr.expected_acks, acks);
                                    if d >= p {
                                        assert_eq!(pr.released_by.len() as i64, acks);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(valid > 10_000, "only {valid} valid combinations");
    }

    #[test]
    fn nixl_reslices() {
        let m = transfer_map(4, 8, 8, false, profile("nixl").unwrap()).unwrap();
        assert_eq!(m.decode[3].sources, vec![(1, vec![3])]);
        let m = transfer_map(8, 2, 8, false, profile("nixl").unwrap()).unwrap();
        assert_eq!(m.decode[1].sources.len(), 4);
        assert!(transfer_map(4, 8, 8, false, profile("moriio").unwrap()).is_err());
    }
}
