//! Budget sweeps: the best valid plan for many GPU budgets of one scenario at once, over the
//! space `solve` searches (its mode and layouts; TP-only P/D splits are the layouts `tpN`).
//!
//! For one (model, GPU type, constants, workload, connector) the candidate rows' operating
//! points do not depend on the budget, so they are built once; each budget (full nodes of the
//! type's node size, the last one partial — what `gpus=N` means) keeps the rows its pool
//! allows and picks its best plan with the node-aware closed forms of [`crate::plan::relax`].
//! Every budget's answer is the plan `pdtp.solve` returns for that budget, compared with the
//! one throughput order of [`crate::plan::order`].
//!
//! Alongside it comes the *rule-blind* best: the same search over every pair of usable rows
//! while ignoring the connector's pair rules, i.e. what a planner that does not know vLLM's
//! heterogeneous-TP rules would deploy.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::layout::Layout;
use crate::plan::candidates::{Candidates, Pair, Role, Row};
use crate::plan::cluster::Fit;
use crate::plan::cluster::{Cluster, Item};
use crate::plan::layouts::layouts;
use crate::plan::order::Term;
use crate::plan::relax;
use crate::plan::rule_blind::best_refused;
use crate::plan::scenario::NodeClass;
use crate::plan::{Order, Scenario, Sense, Solution};
use std::cmp::Reverse;

// ---- the whole space `solve` searches -----------------------------------------------------

/// One budget's plan over every mode and layout, as indices into [`SpaceSweep::rows`] and
/// instance counts (an aggregated plan has `prefill == decode`, both counts its instances).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpacePlan {
    pub prefill: usize,
    pub prefill_instances: i64,
    pub decode: usize,
    pub decode_instances: i64,
    pub gpus_used: i64,
}

/// One budget's answer over the whole space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpacePoint {
    pub best: Option<SpacePlan>,
    /// The best plan over the pairs the connector's rules refuse, when it beats `best`
    /// (what the rules cost; None when they cost nothing).
    pub rule_blind: Option<SpacePlan>,
}

/// The candidate rows (built once, for the largest budget) and one point per budget.
#[derive(Debug, Clone)]
pub struct SpaceSweep {
    pub rows: Vec<Row>,
    pub points: Vec<SpacePoint>,
}

/// `sc` on `gpus` GPUs of its one type: full nodes, the last one partial (`gpus=N`).
fn on_budget(sc: &Scenario, gpus: i64) -> Scenario {
    let node = sc.gpu_types[0].node_size.max(1);
    let (full, rest) = (gpus.max(0) / node, gpus.max(0) % node);
    let mut nodes = Vec::new();
    if full > 0 {
        nodes.push(NodeClass {
            gpu_type: 0,
            free: node,
            count: full,
        });
    }
    if rest > 0 {
        nodes.push(NodeClass {
            gpu_type: 0,
            free: rest,
            count: 1,
        });
    }
    Scenario {
        nodes,
        ..sc.clone()
    }
}

/// Best plans for every budget of a one-model, one-GPU-type scenario over the space
/// `solve` searches (its mode and layouts): the candidate rows are built once (their
/// operating points do not depend on the budget); each budget keeps the rows whose layout
/// its pool allows, places them on its nodes, pairs them as [`Candidates::build`] does and
/// takes the closed forms' best ([`relax::hint`], exact for one model of one type on the
/// throughput order). A budget whose layout space the largest one's rows do not cover is
/// built from scratch.
pub fn sweep_space(sc: &Scenario, budgets: &[i64]) -> SpaceSweep {
    let largest = budgets.iter().copied().max().unwrap_or(1).max(1);
    let base = Candidates::build(on_budget(sc, largest));
    let model = &sc.models[0];
    let lm = model.layout_model();
    // Pair verdicts of the connector's rules, per (prefill row, decode row) of `base`.
    let n = base.rows.len();
    let mut verdicts: Vec<Option<bool>> = vec![None; n * n];
    let mut points = Vec::with_capacity(budgets.len());
    let mut out_rows = base.rows.clone();
    let mut previous: Option<(usize, usize)> = None;
    for &gpus in budgets {
        if gpus <= 0 {
            points.push(SpacePoint {
                best: None,
                rule_blind: None,
            });
            continue;
        }
        let sb = on_budget(sc, gpus);
        let space = layouts(&sb, &sb.models[0], 0);
        let mut rows: Vec<Row> = Vec::with_capacity(base.rows.len());
        let mut origin: Vec<usize> = Vec::with_capacity(base.rows.len());
        let cluster = Cluster::new(&sb);
        for (i, r) in base.rows.iter().enumerate() {
            if space.binary_search(&r.layout).is_ok() {
                let mut r = r.clone();
                r.item = cluster.item(r.gpu_type, r.layout.gpus());
                r.need = None;
                rows.push(r);
                origin.push(i);
            }
        }
        let covered = {
            let mut have: Vec<Layout> = rows.iter().map(|r| r.layout).collect();
            have.sort_unstable();
            have.dedup();
            have == space
        };
        let point = if covered {
            let c = restrict(&sb, rows, cluster, &origin, &lm, &mut verdicts, n);
            // The previous budget's best pair, in this budget's row numbers.
            let local = |base_row: usize| origin.binary_search(&base_row).ok();
            let seeds: Vec<Pair> = previous
                .and_then(|(p, d)| {
                    Some(Pair {
                        model: 0,
                        prefill: local(p)?,
                        decode: local(d)?,
                    })
                })
                .into_iter()
                .collect();
            space_point(&c, |i| origin[i], &seeds)
        } else {
            // A layout the largest budget does not list (PP turns on where a small pool's
            // TP bound holds the weights on no node): this budget's own candidates, whose
            // chosen rows are appended to the output's.
            let c = Candidates::build(sb);
            let mut point = space_point(&c, |i| i, &[]);
            for plan in [&mut point.best, &mut point.rule_blind]
                .into_iter()
                .flatten()
            {
                let (p, d) = (plan.prefill, plan.decode);
                out_rows.push(c.rows[p].clone());
                plan.prefill = out_rows.len() - 1;
                if d == p {
                    plan.decode = plan.prefill;
                } else {
                    out_rows.push(c.rows[d].clone());
                    plan.decode = out_rows.len() - 1;
                }
            }
            point
        };
        previous = point
            .best
            .filter(|b| b.prefill < n && b.decode < n)
            .map(|b| (b.prefill, b.decode));
        points.push(point);
    }
    SpaceSweep {
        rows: out_rows,
        points,
    }
}

/// The candidates of one budget from the base rows kept for it: pairs exactly as
/// [`Candidates::build`] forms them (one model, one GPU type).
fn restrict(
    sb: &Scenario,
    rows: Vec<Row>,
    cluster: Cluster,
    origin: &[usize],
    lm: &crate::layout_rules::LayoutModel,
    verdicts: &mut [Option<bool>],
    base_rows: usize,
) -> Candidates {
    let mut pairs = Vec::new();
    let mut rejected = Vec::new();
    // Whether one instance of each fits the nodes together depends on the two items only.
    let mut together_of: HashMap<(Item, Item), bool> = HashMap::new();
    // A connector whose worker cannot start on this GPU type (MoRIIO off AMD) pairs nothing.
    let runs = crate::plan::candidates::runs_on(sb.connector, sb.gpu_types[0].vendor);
    for (pi, p) in rows.iter().enumerate() {
        if !runs || p.role != Role::Prefill || !p.usable() {
            continue;
        }
        for (di, d) in rows.iter().enumerate() {
            if d.role != Role::Decode || !d.usable() {
                continue;
            }
            let (a, b) = (p.item.unwrap(), d.item.unwrap());
            let together = *together_of
                .entry((a, b))
                .or_insert_with(|| cluster.one_of_each_fits(a, b));
            if !together {
                continue;
            }
            let pair = Pair {
                model: 0,
                prefill: pi,
                decode: di,
            };
            let slot = &mut verdicts[origin[pi] * base_rows + origin[di]];
            let ok = *slot.get_or_insert_with(|| {
                crate::layout_rules::pair_ok(lm, &p.layout, &d.layout, sb.connector, sb.max_acks)
            });
            if ok {
                pairs.push(pair);
            } else {
                rejected.push(pair);
            }
        }
    }
    for (i, r) in rows.iter().enumerate() {
        if r.role == Role::Aggregated && r.usable() {
            pairs.push(Pair {
                model: r.model,
                prefill: i,
                decode: i,
            });
        }
    }
    let mut sizes: Vec<i64> = rows
        .iter()
        .filter(|r| r.usable())
        .map(|r| r.item.unwrap().piece)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    Candidates {
        scenario: sb.clone(),
        rows,
        pairs,
        rejected,
        cluster,
        sizes: vec![sizes],
        unit_scale: vec![1],
        demand_units: vec![0],
    }
}

/// Capacity units a one-model plan serves (the throughput order's first term, as
/// [`Order`] counts it: the smaller side).
fn served(c: &Candidates, s: &Solution) -> Option<i128> {
    let ch = s.first().copied().flatten()?;
    let (p, d) = (&c.rows[ch.pair.prefill], &c.rows[ch.pair.decode]);
    Some(i128::from(
        (ch.prefill.saturating_mul(p.units)).min(ch.decode.saturating_mul(d.units)),
    ))
}

/// A bound on the capacity units a pair's plans serve (their first throughput stage): each
/// side given the whole pool, and for a P/D pair the GPUs both sides share — serving v
/// takes v/A prefill and v/B decode instances, so v · (g_p/A + g_d/B) ≤ the pool's GPUs.
fn reach(c: &Candidates, pair: &Pair, pool_gpus: i64) -> i128 {
    let most = |r: &Row| {
        r.item
            .map_or(0, |it| i128::from(c.cluster.most(it)) * i128::from(r.units))
    };
    let (p, d) = (&c.rows[pair.prefill], &c.rows[pair.decode]);
    if pair.is_aggregated() {
        return most(p);
    }
    let sides = most(p).min(most(d));
    if p.units <= 0 || d.units <= 0 {
        return sides;
    }
    let per_unit = p.gpus() as f64 / p.units as f64 + d.gpus() as f64 / d.units as f64;
    let shared = pool_gpus as f64 / per_unit;
    // Rounded up with a margin: a bound must never fall below a value some plan reaches.
    let shared = if shared.is_finite() && shared < 1e30 {
        (shared * (1.0 + 1e-9)).ceil() as i128 + 1
    } else {
        i128::MAX
    };
    sides.min(shared)
}

/// [`relax::best_over`] `pairs` (exact fit), skipping pairs that cannot reach the best
/// served value found (`floor`, else that of the pair of highest reach): the throughput
/// order maximises served capacity first, so a pair whose reach is below it never wins and
/// the answer is the same. Pairs keep their order (ties go to the first, as without
/// pruning).
fn best_pruned(
    c: &Candidates,
    order: &Order,
    pairs: &[Pair],
    floor: Option<i128>,
    seeds: &[Pair],
) -> Option<Solution> {
    let served_first = order.lex.first() == Some(&(Term::Served, Sense::Max));
    if !served_first || pairs.len() < 8 {
        return relax::best_over(c, order, pairs, Fit::Exact);
    }
    let pool_gpus = c.scenario.total_gpus();
    let reaches: Vec<i128> = pairs.iter().map(|p| reach(c, p, pool_gpus)).collect();
    let floor = match floor {
        Some(v) => v,
        None => {
            // Any plan found is a floor: the pair of highest reach and the given seeds (the
            // previous budget's pair, whose plan a larger pool usually beats only a little).
            let top = (0..pairs.len()).max_by_key(|&i| (reaches[i], Reverse(i)))?;
            let mut tried: Vec<Pair> = vec![pairs[top]];
            tried.extend(seeds.iter().filter(|s| pairs.contains(s)));
            tried
                .into_iter()
                .filter_map(|p| relax::best_over(c, order, &[p], Fit::Exact))
                .filter_map(|s| served(c, &s))
                .max()
                .unwrap_or(0)
        }
    };
    let kept: Vec<Pair> = pairs
        .iter()
        .zip(&reaches)
        .filter(|&(_, &r)| r >= floor)
        .map(|(p, _)| *p)
        .collect();
    relax::best_over(c, order, &kept, Fit::Exact)
}

/// The best plan and the rule-blind one (when better) of one budget's candidates, with
/// row indices mapped by `at`.
fn space_point(c: &Candidates, at: impl Fn(usize) -> usize, seeds: &[Pair]) -> SpacePoint {
    let order = Order::new(c);
    let plan = |s: Option<Solution>| -> Option<SpacePlan> {
        let ch = s?.first().copied().flatten()?;
        let (p, d) = (&c.rows[ch.pair.prefill], &c.rows[ch.pair.decode]);
        let gpus_used = if ch.pair.is_aggregated() {
            ch.prefill * p.gpus()
        } else {
            ch.prefill * p.gpus() + ch.decode * d.gpus()
        };
        Some(SpacePlan {
            prefill: at(ch.pair.prefill),
            prefill_instances: ch.prefill,
            decode: at(ch.pair.decode),
            decode_instances: ch.decode,
            gpus_used,
        })
    };
    let best = best_pruned(c, &order, &c.pairs, None, seeds);
    let blind = match best.as_ref().and_then(|b| served(c, b)) {
        Some(v) => best_pruned(c, &order, &c.rejected, Some(v), &[]),
        None => best_refused(c, &order),
    };
    let blind = match (&best, blind) {
        (Some(b), Some(x)) if order.cmp(c, &x, b) == Ordering::Less => Some(x),
        (None, x) => x,
        _ => None,
    };
    SpacePoint {
        best: plan(best),
        rule_blind: plan(blind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::tests::{h100, llama70, moe_mla, workload};
    use crate::plan::oracle::search;
    use crate::plan::scenario::{Mode, Objective, Vendor};
    use crate::plan::tests::{gpu_type, model, scenario, small_moe};

    /// Every budget's answer of `sweep_space` is the plan of that budget's own candidates:
    /// the closed forms' best on a fresh build (identical, ties included) and, by the
    /// order, the exhaustive oracle's — over mode auto and the default layouts, so a sweep
    /// that kept rows the budget does not allow, paired them differently or pruned a pair
    /// that could win fails here.
    #[test]
    fn space_sweep_equals_each_budgets_own_plan() {
        let budgets: Vec<i64> = (0..=34).chain([40, 48, 63, 64, 65, 100]).collect();
        for perf in [llama70(), moe_mla(), small_moe()] {
            for connector in ["moriio", "nixl"] {
                let mut template = scenario(
                    vec![model(perf, &[h100()], workload(), 0.0)],
                    vec![gpu_type("h100", Vendor::Nvidia, 0)],
                    &[],
                    connector,
                    Objective::Throughput,
                );
                template.mode = Mode::Auto;
                let sweep = sweep_space(&template, &budgets);
                for (&gpus, point) in budgets.iter().zip(&sweep.points) {
                    let c = Candidates::build(on_budget(&template, gpus));
                    let order = Order::new(&c);
                    let name = |r: &Row| (r.role, r.layout);
                    let got = point.best.map(|p| {
                        (
                            name(&sweep.rows[p.prefill]),
                            p.prefill_instances,
                            name(&sweep.rows[p.decode]),
                            p.decode_instances,
                        )
                    });
                    let hint = relax::hint(&c, &order);
                    let want = hint.as_ref().and_then(|s| s[0]).map(|ch| {
                        (
                            name(&c.rows[ch.pair.prefill]),
                            ch.prefill,
                            name(&c.rows[ch.pair.decode]),
                            ch.decode,
                        )
                    });
                    let at = format!("gpus={gpus} {connector} {}", perf.weight_bytes);
                    assert_eq!(got, want, "{at}");
                    if gpus <= 40 {
                        let (exact, done) = search(&c, &order, None, true);
                        assert!(done, "{at}");
                        match (&hint, &exact) {
                            (Some(h), Some(e)) => {
                                assert_eq!(order.cmp(&c, h, e), Ordering::Equal, "{at}")
                            }
                            (h, e) => assert_eq!(h.is_some(), e.is_some(), "{at}"),
                        }
                    }
                }
                assert!(sweep.points.iter().any(|p| p.best.is_some()));
            }
        }
    }
}
