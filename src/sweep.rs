//! Budget sweeps: the best valid plan for many GPU budgets of one scenario at once.
//!
//! For one (model, GPU type, constants, workload, connector, max_tp) the per-side options
//! depend on the TP size only, never on the budget, so they are built once; each budget
//! (full nodes of the type's node size, the last one partial — what `gpus=N` means) then
//! picks its best pair with the node-aware closed form of [`crate::plan::relax`] (exact:
//! divisibility chains in closed form, other sizes by the exact search over nodes). Every
//! budget's answer is the plan `pdtp.solve` returns for that budget, compared with the one
//! throughput order of [`crate::plan::order`].
//!
//! Alongside it comes the *rule-blind* best: the same search over every pair of usable sides
//! while ignoring the connector's pair rules (size rule, replicated-KV-head guard, acks), i.e.
//! what a planner that does not know vLLM's heterogeneous-TP rules would deploy.

use std::cmp::Ordering;

use crate::check::pair_ok;
use crate::plan::cluster::{most_served, room, Fit};
use crate::plan::cluster::{Cluster, Item, TooLarge};
use crate::plan::order::{cmp_lex, lexicographic, Term};
use crate::plan::{side_option, Objective, Scenario, SideOption};

/// One budget's plan: `prefill_instances` × prefill TP + `decode_instances` × decode TP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepPlan {
    pub prefill_tp: i64,
    pub prefill_instances: i64,
    pub decode_tp: i64,
    pub decode_instances: i64,
    /// min(prefill, decode) capacity in capacity units.
    pub value: i64,
    pub gpus_used: i64,
}

impl SweepPlan {
    fn term(&self, t: Term) -> i128 {
        (match t {
            Term::Served => self.value,
            Term::Gpus => self.gpus_used,
            Term::TpSum => self.prefill_tp + self.decode_tp,
            Term::PrefillTp => self.prefill_tp,
            Term::Instances => self.prefill_instances + self.decode_instances,
            Term::PrefillInstances => self.prefill_instances,
            _ => 0, // one GPU type: type rank and cost (∝ GPUs) never differ
        }) as i128
    }
}

/// One budget's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepPoint {
    /// The best valid plan (None: infeasible at this budget).
    pub best: Option<SweepPlan>,
    /// The best plan over all pairs of usable sides, valid or not.
    pub rule_blind: Option<SweepPlan>,
    /// Whether `rule_blind` is a pair the connector accepts.
    pub rule_blind_valid: bool,
}

/// The side options (TP 1..=min(max_tp, largest budget)) and one point per budget, in the
/// order of `budgets`.
#[derive(Debug, Clone, Default)]
pub struct Sweep {
    pub prefill: Vec<SideOption>,
    pub decode: Vec<SideOption>,
    pub points: Vec<SweepPoint>,
}

/// The best plan of one pair on one budget's nodes. `caps[s]`: items of `s` GPUs the nodes
/// hold (one per node each), for the sizes in one node.
fn pair_plan(cl: &Cluster, caps: &[i64], p: &SideOption, d: &SideOption) -> Option<SweepPlan> {
    let (a, b): (Item, Item) = (cl.item(0, p.tp)?, cl.item(0, d.tp)?);
    let (sp, sd) = (p.tp as usize, d.tp as usize);
    let found = if a.pieces == 1 && b.pieces == 1 && (sp % sd == 0 || sd % sp == 0) {
        // Sizes that divide each other: the per-size capacity cuts are exact (cluster.rs),
        // with the capacities computed once per budget.
        let room = |np: i64| -> Result<Option<i64>, TooLarge> {
            let mut best = i64::MAX;
            for s in [sp, sd] {
                let left = caps[s] - (sp / s) as i64 * np;
                if left < 0 {
                    return Ok(None);
                }
                let per = (sd / s) as i64;
                if per > 0 {
                    best = best.min(left / per);
                }
            }
            Ok(Some(best))
        };
        most_served(p.units, d.units, caps[sp], &room)
            .ok()
            .flatten()
    } else {
        general_plan(cl, a, b, p, d)
    };
    found.map(|(np, nd, value)| SweepPlan {
        prefill_tp: p.tp,
        prefill_instances: np,
        decode_tp: d.tp,
        decode_instances: nd,
        value,
        gpus_used: p.tp * np + d.tp * nd,
    })
}

/// Sizes that do not divide each other, or instances spanning whole nodes.
fn general_plan(
    cl: &Cluster,
    a: Item,
    b: Item,
    p: &SideOption,
    d: &SideOption,
) -> Option<(i64, i64, i64)> {
    let exact = |np: i64| room(cl, a, np, b, Fit::Exact);
    match most_served(p.units, d.units, cl.most(a), &exact) {
        Ok(x) => x,
        // Unreachable for catalog node sizes (≤ 8): sizes that do not divide each other are
        // then at least 3, two per node at most, which the exact closed form covers.
        Err(TooLarge) => most_served(p.units, d.units, cl.most(a), &|np| {
            room(cl, a, np, b, Fit::Relaxed)
        })
        .ok()
        .flatten()
        .filter(|&(np, nd, _)| cl.fits(&[(a, np), (b, nd)]) == Ok(true)),
    }
}

/// Best plans for every budget in `budgets` of a one-model, one-GPU-type scenario (its
/// nodes are ignored: each budget replaces them).
pub fn sweep_budgets(sc: &Scenario, budgets: &[i64]) -> Sweep {
    let model = &sc.models[0];
    let gt = &sc.gpu_types[0];
    let shape = model.perf.shape();
    let node = gt.node_size.max(1);
    let max_tp = sc.max_tp.unwrap_or(node);
    let largest = budgets.iter().copied().max().unwrap_or(0);
    let bound = max_tp.min(largest).max(0);
    let side = |tp: i64, prefill: bool| {
        side_option(
            &model.perf,
            &shape,
            &model.gpu_perf[0],
            &gt.constants,
            &model.workload,
            sc.gpu_memory_utilization,
            tp,
            prefill,
        )
    };
    let prefill: Vec<SideOption> = (1..=bound).map(|tp| side(tp, true)).collect();
    let decode: Vec<SideOption> = (1..=bound).map(|tp| side(tp, false)).collect();
    let ps: Vec<&SideOption> = prefill.iter().filter(|o| o.usable()).collect();
    let ds: Vec<&SideOption> = decode.iter().filter(|o| o.usable()).collect();
    // Pair validity, once: ok[i][j] for usable prefill i and usable decode j (none where the
    // connector's worker cannot start on this GPU type: MoRIIO off AMD).
    let runs = crate::plan::candidates::runs_on(sc.connector, gt.vendor);
    let ok: Vec<Vec<bool>> = ps
        .iter()
        .map(|p| {
            ds.iter()
                .map(|d| runs && pair_ok(&shape, p.tp, d.tp, sc.connector, sc.max_acks))
                .collect()
        })
        .collect();
    let lex = lexicographic(&Objective::Throughput, false);
    let better = |a: &SweepPlan, b: &SweepPlan| {
        cmp_lex(&lex, |t| a.term(t), |t| b.term(t)) == Ordering::Less
    };
    let points = budgets
        .iter()
        .map(|&gpus| {
            let cl = Cluster::uniform(node, gpus.max(0));
            let caps: Vec<i64> = (0..=node.max(bound))
                .map(|s| if s == 0 { 0 } else { cl.cap(0, s) })
                .collect();
            let tp_cap = max_tp.min(gpus);
            let mut best: Option<SweepPlan> = None;
            let mut blind: Option<(SweepPlan, bool)> = None;
            for (i, p) in ps.iter().enumerate() {
                if p.tp > tp_cap {
                    break; // usable sizes are ascending
                }
                for (j, d) in ds.iter().enumerate() {
                    if d.tp > tp_cap || p.tp + d.tp > gpus {
                        break;
                    }
                    let valid = ok[i][j];
                    // A pair that serves less than the plans found even with the whole pool
                    // on each side cannot come first (served comes first in the order).
                    let most = |o: &SideOption| {
                        let n = if (o.tp as usize) < caps.len() {
                            caps[o.tp as usize]
                        } else {
                            0
                        };
                        let n = if o.tp > node {
                            cl.item(0, o.tp).map_or(0, |it| cl.most(it))
                        } else {
                            n
                        };
                        n.saturating_mul(o.units)
                    };
                    let reach = most(p).min(most(d));
                    let beaten = |x: Option<&SweepPlan>| x.is_some_and(|x| reach < x.value);
                    if beaten(blind.as_ref().map(|b| &b.0)) && (!valid || beaten(best.as_ref())) {
                        continue;
                    }
                    let Some(plan) = pair_plan(&cl, &caps, p, d) else {
                        continue;
                    };
                    if valid && best.is_none_or(|b| better(&plan, &b)) {
                        best = Some(plan);
                    }
                    if blind.is_none_or(|(b, _)| better(&plan, &b)) {
                        blind = Some((plan, valid));
                    }
                }
            }
            SweepPoint {
                best,
                rule_blind: blind.map(|(c, _)| c),
                rule_blind_valid: blind.is_some_and(|(_, v)| v),
            }
        })
        .collect();
    Sweep {
        prefill,
        decode,
        points,
    }
}
