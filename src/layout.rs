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

    /// True for a TP-only layout.
    pub fn is_tp_only(&self) -> bool {
        self.pp == 1 && self.dp == 1 && !self.ep
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
}
