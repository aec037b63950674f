//! How one vLLM instance spreads the model over its GPUs: tensor parallel (`tp`), pipeline
//! parallel (`pp`), data-parallel attention ranks (`dp`, vLLM's `--data-parallel-size`) and
//! expert parallel (`ep`, vLLM's `--enable-expert-parallel`, EP size = tp × dp).
//!
//! One value of this type is "a layout" everywhere in the core: rules, performance model,
//! candidate rows and planners take it, so a new parallelism is one field here plus its
//! rules and performance terms.

/// The parallel layout of one instance (one prefill, decode or aggregated engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Layout {
    /// Tensor-parallel size of each pipeline stage of each DP rank (one node at most).
    pub tp: i64,
    /// Pipeline-parallel stages.
    pub pp: i64,
    /// Data-parallel attention ranks (each runs its own scheduler and KV cache).
    pub dp: i64,
    /// Experts sharded over the tp × dp ranks instead of each rank holding a TP slice of
    /// every expert.
    pub ep: bool,
}

impl Layout {
    /// A tensor-parallel-only layout (what pdtp planned before layouts existed).
    pub const fn tp(tp: i64) -> Layout {
        Layout {
            tp,
            pp: 1,
            dp: 1,
            ep: false,
        }
    }

    /// GPUs one instance of this layout occupies.
    pub fn gpus(&self) -> i64 {
        self.tp.saturating_mul(self.pp).saturating_mul(self.dp)
    }

    /// Ranks the routed experts are spread over (1: every rank holds a TP slice of each).
    pub fn ep_size(&self) -> i64 {
        if self.ep {
            self.tp.saturating_mul(self.dp)
        } else {
            1
        }
    }

    /// Expert parallel is in use: enabled and more than one rank (vLLM's
    /// `FusedMoEParallelConfig.make`: `tp1·dp1·ep` runs as plain TP).
    pub fn uses_ep(&self) -> bool {
        self.ep && self.tp.saturating_mul(self.dp) > 1
    }

    /// The MoE layers' own TP size: 1 under expert parallel, else the TP group flattened
    /// across the DP ranks (`tp × dp`: without EP every rank holds a slice of every expert).
    pub fn moe_tp_size(&self) -> i64 {
        if self.uses_ep() {
            1
        } else {
            self.tp.saturating_mul(self.dp)
        }
    }

    /// Experts EP rank `rank` holds of `num_experts` (vLLM's `determine_expert_map`:
    /// `E // ep` each, the first `E % ep` ranks one more; no divisibility rule).
    pub fn experts_on_rank(&self, num_experts: i64, rank: i64) -> i64 {
        let ep = self.ep_size().max(1);
        num_experts.max(0) / ep + i64::from(rank < num_experts.max(0) % ep)
    }

    /// The most experts one rank holds (rank 0's: what memory must fit).
    pub fn most_experts_per_rank(&self, num_experts: i64) -> i64 {
        self.experts_on_rank(num_experts, 0)
    }

    /// True for a TP-only layout.
    pub fn is_tp_only(&self) -> bool {
        self.pp == 1 && self.dp == 1 && !self.ep
    }
}

/// Largest size any one parallelism of a parsed layout may have (as `MAX_TP` in Python).
pub const MAX_DIM: i64 = 1 << 16;

impl Layout {
    /// `tp2`, `pp2` … parts joined (`tp8pp2`) or separated by `·`, `-`, `_`, `.`, `,`, `+`
    /// or spaces (`tp2·dp4·ep`, the display form); `ep` alone or `epN` with N = tp × dp.
    /// A missing part is 1 (`dp8ep` = tp1·dp8·ep). Case-insensitive.
    pub fn parse(text: &str) -> Result<Layout, String> {
        let form = "a layout such as \"tp4\", \"tp2dp4ep\" or \"tp8pp2\" (parts tpN, ppN, dpN \
                    and ep, each at most once)";
        let lower = text.trim().to_ascii_lowercase();
        let cleaned: String = lower
            .chars()
            .filter(|c| !matches!(c, '·' | '-' | '_' | '.' | ',' | '+' | ' ' | '\t'))
            .collect();
        if cleaned.is_empty() {
            return Err(format!("expected {form}, got {text:?}"));
        }
        let (mut tp, mut pp, mut dp, mut ep): (Option<i64>, Option<i64>, Option<i64>, Option<i64>) =
            (None, None, None, None);
        let mut ep_seen = false;
        let bytes = cleaned.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let key = cleaned.get(i..i + 2).unwrap_or("");
            if !matches!(key, "tp" | "pp" | "dp" | "ep") {
                return Err(format!("expected {form}, got {text:?}"));
            }
            i += 2;
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let digits = &cleaned[start..i];
            let value = if digits.is_empty() {
                None
            } else {
                match digits.parse::<i64>() {
                    Ok(v) if (1..=MAX_DIM).contains(&v) => Some(v),
                    _ => {
                        return Err(format!(
                            "{key} in {text:?} must be an integer in [1, {MAX_DIM}], got {digits}"
                        ))
                    }
                }
            };
            let slot = match key {
                "tp" => &mut tp,
                "pp" => &mut pp,
                "dp" => &mut dp,
                _ => {
                    if ep_seen {
                        return Err(format!("ep appears twice in {text:?}; expected {form}"));
                    }
                    ep_seen = true;
                    ep = value;
                    continue;
                }
            };
            if slot.is_some() {
                return Err(format!("{key} appears twice in {text:?}; expected {form}"));
            }
            match value {
                Some(v) => *slot = Some(v),
                None => return Err(format!("{key} needs a size in {text:?} (e.g. {key}2)")),
            }
        }
        let layout = Layout {
            tp: tp.unwrap_or(1),
            pp: pp.unwrap_or(1),
            dp: dp.unwrap_or(1),
            ep: ep_seen,
        };
        if let Some(n) = ep {
            if n != layout.tp.saturating_mul(layout.dp) {
                return Err(format!(
                    "ep{n} in {text:?}: vLLM's expert-parallel size is tp × dp = {} \
                     (--enable-expert-parallel spans every rank); write ep or ep{}",
                    layout.tp * layout.dp,
                    layout.tp * layout.dp
                ));
            }
        }
        Ok(layout)
    }

    /// The layers each pipeline stage holds, as `(first, end)` ranges: vLLM's
    /// `get_pp_indices` — `L / pp` each, the remainder one more each on the stages before
    /// the last, counted back from the second-to-last (no divisibility rule).
    pub fn stage_layers(&self, num_layers: i64) -> Vec<(i64, i64)> {
        let pp = self.pp.max(1);
        let mut parts = vec![num_layers.max(0) / pp; pp as usize];
        let rest = num_layers.max(0) % pp;
        for i in 2..rest + 2 {
            let k = parts.len() as i64 - i;
            if k >= 0 {
                parts[k as usize] += 1;
            }
        }
        let mut start = 0;
        parts
            .into_iter()
            .map(|n| {
                let r = (start, start + n);
                start += n;
                r
            })
            .collect()
    }

    /// The compact name users type and `parse` reads back: `tp2dp4ep`, `tp8pp2`.
    pub fn key(&self) -> String {
        self.to_string().replace('·', "")
    }
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Layout, String> {
        Layout::parse(s)
    }
}

impl std::fmt::Display for Layout {
    /// `tp4`, `tp2·dp4·ep`, `tp8·pp2`: the short name used in tables and messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tp{}", self.tp)?;
        if self.pp != 1 {
            write!(f, "·pp{}", self.pp)?;
        }
        if self.dp != 1 {
            write!(f, "·dp{}", self.dp)?;
        }
        if self.ep {
            f.write_str("·ep")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_and_names() {
        let l = Layout {
            tp: 2,
            pp: 1,
            dp: 4,
            ep: true,
        };
        assert_eq!(l.gpus(), 8);
        assert_eq!(l.ep_size(), 8);
        assert_eq!(l.to_string(), "tp2·dp4·ep");
        assert_eq!(Layout::tp(8).to_string(), "tp8");
        assert!(Layout::tp(8).is_tp_only() && !l.is_tp_only());
        assert_eq!(Layout::tp(4).ep_size(), 1);
    }

    #[test]
    fn stage_layers_follow_vllms_get_pp_indices() {
        let l = |pp| Layout {
            pp,
            ..Layout::tp(8)
        };
        assert_eq!(l(2).stage_layers(126), vec![(0, 63), (63, 126)]);
        // 61 layers over 4 stages: 15 each, one more on the third stage.
        assert_eq!(
            l(4).stage_layers(61),
            vec![(0, 15), (15, 30), (30, 46), (46, 61)]
        );
        // 7 over 4: the remainder (3) on stages 2, 1, 0.
        assert_eq!(l(4).stage_layers(7), vec![(0, 2), (2, 4), (4, 6), (6, 7)]);
        assert_eq!(Layout::tp(2).stage_layers(80), vec![(0, 80)]);
    }

    #[test]
    fn parse_reads_every_spelling_and_names_what_is_wrong() {
        let l = Layout {
            tp: 2,
            pp: 1,
            dp: 4,
            ep: true,
        };
        for s in [
            "tp2dp4ep",
            "tp2·dp4·ep",
            "TP2-DP4-EP",
            "dp4 tp2 ep8",
            "tp2_dp4_ep",
        ] {
            assert_eq!(Layout::parse(s), Ok(l), "{s}");
        }
        assert_eq!(Layout::parse("tp8pp2").unwrap().gpus(), 16);
        assert_eq!(
            Layout::parse("dp8ep").unwrap(),
            Layout { tp: 1, dp: 8, ..l }
        );
        assert_eq!(Layout::parse("tp4"), Ok(Layout::tp(4)));
        for bad in [
            "",
            "tp",
            "tp0",
            "tp2tp4",
            "tpx",
            "ep4dp2tp1",
            "tp2dp4ep4",
            "4",
            "tp99999999",
        ] {
            let e = Layout::parse(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        for l in [l, Layout::tp(8), Layout::parse("tp4pp2").unwrap()] {
            assert_eq!(Layout::parse(&l.key()), Ok(l));
            assert_eq!(Layout::parse(&l.to_string()), Ok(l));
        }
    }
}
