//! Who reads from whom: for each decode rank the prefill rank(s) it reads and the KV heads
//! it receives from each; for each prefill rank the heads it holds, its readers and the
//! release acks it waits for.

use crate::check::{check_pair, Shape, Violation};
use crate::connector::{ConnectorProfile, ReadRule};
use crate::rules;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeRankMap {
    pub rank: i64,
    /// KV-head indices this decode rank holds (MLA: `[0]`, the whole latent).
    pub heads: Vec<i64>,
    /// (prefill rank, heads received from it), in read order.
    pub sources: Vec<(i64, Vec<i64>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefillRankMap {
    pub rank: i64,
    pub heads: Vec<i64>,
    /// Decode ranks that read this prefill rank.
    pub readers: Vec<i64>,
    /// Release acks this rank waits for before freeing a request's blocks.
    pub expected_acks: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferMap {
    pub decode: Vec<DecodeRankMap>,
    pub prefill: Vec<PrefillRankMap>,
}

/// Largest TP size `transfer_map` lays out rank by rank (the output grows as P + D).
pub const MAX_MAP_TP: i64 = 1 << 16;

fn intersect(a: &[i64], b: &[i64]) -> Vec<i64> {
    a.iter().copied().filter(|x| b.contains(x)).collect()
}

/// Build the map for a valid pair; an invalid pair returns the first violation vLLM would
/// raise. Attention-head divisibility is not checked here (the map only needs KV heads).
pub fn transfer_map(
    p: i64,
    d: i64,
    kv_heads: i64,
    is_mla: bool,
    profile: &ConnectorProfile,
) -> Result<TransferMap, Violation> {
    // Attention heads = lcm-free stand-in that always divides: P·D·H is a multiple of both.
    let shape = Shape {
        num_attention_heads: p.saturating_mul(d),
        num_kv_heads: kv_heads,
        is_mla,
    };
    let report = check_pair(&shape, p, d, profile, None);
    if let Some(first) = report.violations.into_iter().next() {
        return Err(first);
    }
    let heads_p: Vec<Vec<i64>> = (0..p)
        .map(|r| rules::kv_heads_of_rank(kv_heads, p, r, is_mla))
        .collect();
    let expected_acks = rules::expected_ack_count(p, d).unwrap_or(1);
    let mut readers: Vec<Vec<i64>> = vec![Vec::new(); p as usize];
    let mut decode = Vec::with_capacity(d as usize);
    for r in 0..d {
        let heads = rules::kv_heads_of_rank(kv_heads, d, r, is_mla);
        let group: Vec<i64> = match profile.read_rule {
            ReadRule::OneRankWholeBlocks => {
                vec![rules::remote_tp_rank(r, d, p).unwrap_or(0)]
            }
            ReadRule::ResliceHeads => {
                if d >= p || is_mla {
                    vec![r * p / d]
                } else {
                    let k = p / d;
                    (r * k..(r + 1) * k).collect()
                }
            }
        };
        let mut sources: Vec<(i64, Vec<i64>)> = Vec::new();
        for src in group {
            let got = match profile.read_rule {
                // Whole blocks: whatever the prefill rank holds arrives as is.
                ReadRule::OneRankWholeBlocks => heads_p[src as usize].clone(),
                ReadRule::ResliceHeads => intersect(&heads, &heads_p[src as usize]),
            };
            // Deduplicate ranks that would send heads already received (replicated heads).
            if got.is_empty() || sources.iter().any(|(_, h)| *h == got) {
                continue;
            }
            readers[src as usize].push(r);
            sources.push((src, got));
        }
        decode.push(DecodeRankMap {
            rank: r,
            heads,
            sources,
        });
    }
    let prefill = heads_p
        .into_iter()
        .zip(readers)
        .enumerate()
        .map(|(r, (heads, readers))| PrefillRankMap {
            rank: r as i64,
            heads,
            readers,
            expected_acks,
        })
        .collect();
    Ok(TransferMap { decode, prefill })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::profile;

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
    fn moriio_d4_reads_p8_leaves_ranks_unread() {
        let m = transfer_map(8, 4, 4, false, profile("moriio").unwrap()).unwrap();
        let reads: Vec<i64> = m.decode.iter().map(|x| x.sources[0].0).collect();
        assert_eq!(reads, [0, 2, 4, 6]);
        assert!(m.prefill[1].readers.is_empty());
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
    /// connector: each decode rank receives exactly the heads it holds, once each, from
    /// ranks that hold them; acks equal `expected_ack_count`; MoRIIO reads `remote_tp_rank`.
    #[test]
    fn exhaustive_map_properties() {
        let mut valid = 0;
        for prof in crate::connector::PROFILES {
            for p in 1..=64 {
                for d in 1..=64 {
                    for h in 1..=128 {
                        for mla in [false, true] {
                            let Ok(m) = transfer_map(p, d, h, mla, prof) else {
                                continue;
                            };
                            valid += 1;
                            let acks = rules::expected_ack_count(p, d).unwrap();
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
                                assert_eq!(got, dr.heads, "{} P{p} D{d} H{h} {mla}", prof.name);
                                if prof.name == "moriio" {
                                    let want = rules::remote_tp_rank(dr.rank, d, p).unwrap();
                                    assert_eq!(dr.sources.len(), 1);
                                    assert_eq!(dr.sources[0].0, want);
                                }
                            }
                            for pr in &m.prefill {
                                assert_eq!(pr.expected_acks, acks);
                                assert_eq!(pr.readers, readers[pr.rank as usize]);
                                if prof.name == "moriio" && d >= p {
                                    assert_eq!(pr.readers.len() as i64, acks);
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
