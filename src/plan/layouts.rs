//! Which layouts the planners build rows for, per model and GPU type.
//!
//! Families (any subset, or pdtp's default):
//!
//! - **tp**: tensor parallel only, tp = 1 ..= the TP bound (`max_tp`, else the node size);
//! - **ep**: tensor parallel with expert parallel (EP size = tp), tp ≥ 2 — MoE models;
//! - **dp**: data-parallel attention, with expert parallel (EP size = tp × dp) or without it
//!   (every expert sliced over the tp × dp ranks, vLLM's MoE without EP): tp ≤ the node size
//!   GPUs per DP rank, dp = 2, 4, 8 … ranks — MoE models;
//! - **pp**: tp ≤ the node size GPUs per stage, pp = 2 ..= 8 stages.
//!
//! The default is tp always, ep and dp for MoE models, and pp only on GPU types where no
//! tensor-parallel layout inside one node holds the weights (Llama-3.1-405B in bf16 on
//! H100, DeepSeek-R1 in bf16). An instance occupies at most [`MAX_INSTANCE_NODES`] nodes,
//! and one that is larger than a node takes whole nodes (its DP ranks or pipeline stages
//! span them; every TP group stays inside one node), so only sizes that fit a node or
//! fill whole nodes are listed. Explicit layouts are added as given.

use crate::layout::Layout;
use crate::perf::weights_fit_layout;

use super::scenario::{Families, ModelSpec, Role, Scenario};

/// Most nodes one instance (its DP ranks or pipeline stages) spans.
pub const MAX_INSTANCE_NODES: i64 = 8;
/// Most pipeline stages considered.
pub const MAX_PP: i64 = 8;

/// pdtp's default families for `model` on GPU type `t`.
pub fn default_families(sc: &Scenario, model: &ModelSpec, t: usize) -> Families {
    let node = sc.gpu_types[t].node_size;
    let inside = sc.tp_bound(t).min(node);
    let fits_a_node = (1..=inside).any(|tp| {
        weights_fit_layout(
            &model.perf,
            &model.gpu_perf[t],
            &sc.gpu_types[t].constants,
            &Layout::tp(tp),
            // The largest fraction any role of it is sized at: whether it could fit.
            [Role::Prefill, Role::Decode, Role::Aggregated]
                .iter()
                .map(|&r| model.util_for(t, &Layout::tp(tp), r, sc.gpu_memory_utilization))
                .fold(0.0, f64::max),
        )
    });
    Families {
        tp: true,
        ep: model.is_moe(),
        dp: model.is_moe(),
        pp: !fits_a_node,
    }
}

/// The layouts of `model` on GPU type `t`, ascending, without repeats.
pub fn layouts(sc: &Scenario, model: &ModelSpec, t: usize) -> Vec<Layout> {
    let space = &sc.layouts;
    let families = match space.families {
        Some(f) => f,
        None if space.explicit.is_empty() => default_families(sc, model, t),
        None => Families {
            tp: false,
            ep: false,
            dp: false,
            pp: false,
        },
    };
    let node = sc.gpu_types[t].node_size.max(1);
    let total = sc.gpus_of(t);
    let bound = sc.tp_bound(t);
    let inside = bound.min(node);
    let span = total.min(node.saturating_mul(MAX_INSTANCE_NODES));
    let placeable = |g: i64| g >= 1 && g <= span && (g <= node || g % node == 0);
    let moe = model.is_moe();
    let mut out: Vec<Layout> = Vec::new();
    if families.tp {
        out.extend((1..=bound).map(Layout::tp));
    }
    if families.ep && moe {
        out.extend((2..=bound).map(|tp| Layout {
            ep: true,
            ..Layout::tp(tp)
        }));
    }
    if families.dp && moe {
        for tp in 1..=inside {
            let mut dp = 2;
            while tp.saturating_mul(dp) <= span {
                if placeable(tp * dp) {
                    for ep in [true, false] {
                        out.push(Layout { tp, pp: 1, dp, ep });
                    }
                }
                dp *= 2;
            }
        }
    }
    if families.pp {
        for tp in 1..=inside {
            for pp in 2..=MAX_PP {
                if placeable(tp.saturating_mul(pp)) {
                    out.push(Layout {
                        pp,
                        ..Layout::tp(tp)
                    });
                }
            }
        }
    }
    out.extend(space.explicit.iter().copied());
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::tests::{h100, workload};
    use crate::plan::scenario::{Objective, Vendor};
    use crate::plan::tests::{gpu_type, model, scenario, small_moe};

    #[test]
    fn dp_attention_is_offered_with_and_without_expert_parallel_for_moe_models() {
        let m = model(small_moe(), &[h100()], workload(), 0.0);
        let sc = scenario(
            vec![m.clone()],
            vec![gpu_type("h100", Vendor::Nvidia, 1)],
            &[(0, 8, 4)],
            "nixl",
            Objective::Throughput,
        );
        let space = layouts(&sc, &m, 0);
        for ep in [true, false] {
            let dp4 = Layout {
                tp: 1,
                pp: 1,
                dp: 4,
                ep,
            };
            assert!(space.contains(&dp4), "{dp4} missing from {space:?}");
        }
        assert!(space.iter().any(|l| l.dp > 1 && !l.ep && l.gpus() > 8));
    }
}
