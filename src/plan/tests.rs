//! Cross-checks of the planning core: the closed forms (hints, bounds), the oracle's
//! dominance reductions against the full enumeration, on sampled scenarios
//! with partly free nodes, TP sizes that do not divide the node and two GPU types.

use std::cmp::Ordering;

use super::candidates::Candidates;
use super::oracle::search;
use super::order::{Order, Sense, Term, Value};
use super::relax::{bound, hint};
use super::scenario::*;
use crate::connector::profile;
use crate::perf::tests::{consts, h100, llama70, workload};
use crate::perf::{GpuPerf, ModelPerf, Workload};

/// A small GQA model (4 KV heads: MoRIIO's guard bites) and one with 40 heads / 10 KV
/// heads, whose loadable TP sizes include 5.
pub fn small(kv_heads: i64) -> ModelPerf {
    ModelPerf {
        num_layers: 32.0,
        num_attention_layers: 32.0,
        hidden_size: 4096.0,
        num_attention_heads: 32.0,
        num_kv_heads: kv_heads,
        head_dim: 128.0,
        weight_bytes: 8e9 * 2.0,
        active_params: 8e9,
        ..llama70()
    }
}

/// A Qwen3-30B-A3B-shaped MoE (128 experts, top 8, 4 KV heads): DP-attention + EP layouts.
pub fn small_moe() -> ModelPerf {
    ModelPerf {
        num_layers: 48.0,
        num_attention_layers: 48.0,
        num_moe_layers: 48.0,
        hidden_size: 2048.0,
        num_attention_heads: 32.0,
        num_kv_heads: 4,
        head_dim: 128.0,
        weight_bytes: 61e9,
        expert_weight_bytes: 58e9,
        num_experts: 128.0,
        experts_per_token: 8.0,
        active_params: 3.3e9,
        unread_weight_bytes: 151936.0 * 2048.0 * 2.0,
        ..llama70()
    }
}

pub fn five() -> ModelPerf {
    ModelPerf {
        num_attention_heads: 40.0,
        num_kv_heads: 10,
        weight_bytes: 14e9 * 2.0,
        active_params: 14e9,
        ..small(10)
    }
}

fn mi(scale: f64) -> GpuPerf {
    GpuPerf {
        memory_bytes: 192.0 * (1u64 << 30) as f64 * scale,
        hbm_bandwidth: 5.3e12 * scale,
        ..h100()
    }
}

pub fn gpu_type(name: &str, vendor: Vendor, price: i64) -> GpuType {
    GpuType {
        name: name.into(),
        vendor,
        constants: consts(),
        node_size: 8,
        price,
        max_num_batched_tokens: 8192.0,
    }
}

pub fn model(perf: ModelPerf, gpus: &[GpuPerf], w: Workload, demand: f64) -> ModelSpec {
    ModelSpec {
        name: "m".into(),
        perf,
        workload: w,
        gpu_perf: gpus.to_vec(),
        demand_rps: demand,
        weight: 1.0,
        supports_pp: true,
        memory_fractions: Vec::new(),
        sliding_window: false,
        output_groups: 0,
    }
}

pub fn scenario(
    models: Vec<ModelSpec>,
    types: Vec<GpuType>,
    nodes: &[(usize, i64, i64)],
    connector: &str,
    objective: Objective,
) -> Scenario {
    Scenario {
        models,
        gpu_types: types,
        nodes: nodes
            .iter()
            .map(|&(t, free, count)| NodeClass {
                gpu_type: t,
                free,
                count,
            })
            .collect(),
        connector: profile(connector).unwrap(),
        max_tp: None,
        max_acks: None,
        gpu_memory_utilization: 0.9,
        objective,
        mode: Mode::Auto,
        layouts: LayoutSpace::default(),
    }
}

fn loose() -> Workload {
    Workload {
        ttft: None,
        tpot: None,
        ..workload()
    }
}

/// Node layouts: whole nodes, a partial last node, partly free nodes, tiny pools.
const NODES: &[&[(usize, i64, i64)]] = &[
    &[(0, 8, 1)],
    &[(0, 8, 2), (0, 5, 1)],
    &[(0, 8, 1), (0, 5, 2), (0, 3, 1)],
    &[(0, 6, 2), (0, 4, 1)],
    &[(0, 2, 3)],
    &[(0, 7, 1), (0, 1, 2)],
];

fn single_type_cases(objective: Objective, demand: f64) -> Vec<Scenario> {
    let mut out = Vec::new();
    let models = [
        (llama70(), workload()),
        (small(4), workload()),
        (small(1), loose()),
        (five(), loose()),
        (small_moe(), workload()),
    ];
    for (perf, w) in models {
        for nodes in NODES {
            for connector in ["moriio", "nixl"] {
                let m = model(perf, &[h100()], w, demand);
                out.push(scenario(
                    vec![m],
                    vec![gpu_type("h100", Vendor::Nvidia, 32_000)],
                    nodes,
                    connector,
                    objective,
                ));
            }
        }
    }
    out
}

fn two_type_cases(objective: Objective, demand: f64) -> Vec<Scenario> {
    let mut out = Vec::new();
    for perf in [small(8), five(), llama70()] {
        for nodes in [
            &[(0, 8, 1), (1, 8, 1)][..],
            &[(0, 4, 1), (1, 8, 1), (1, 3, 1)],
            &[(0, 8, 1), (0, 2, 1), (1, 5, 1)],
        ] {
            for (connector, vendor) in [("moriio", Vendor::Amd), ("nixl", Vendor::Nvidia)] {
                let m = model(perf, &[mi(1.0), mi(0.6)], workload(), demand);
                out.push(scenario(
                    vec![m],
                    vec![gpu_type("a", vendor, 25_000), gpu_type("b", vendor, 18_500)],
                    nodes,
                    connector,
                    objective,
                ));
            }
        }
    }
    out
}

fn objectives() -> Vec<(Objective, f64)> {
    let run = |t, n| Running {
        gpu_type: Some(0),
        role: super::candidates::Role::Prefill,
        layout: crate::layout::Layout::tp(t),
        instances: n,
    };
    let dec = |t, n| Running {
        role: super::candidates::Role::Decode,
        ..run(t, n)
    };
    vec![
        (Objective::Throughput, 0.0),
        (Objective::FewestGpus, 3.0),
        (Objective::FewestGpus, 40.0),
        (Objective::Cost, 12.0),
        (Objective::TokensPerDollar, 0.0),
        (
            Objective::Moves {
                weights: MoveCost {
                    start: 1.0,
                    stop: 1.0,
                    restart: 0.0,
                    gpu: 0.5,
                },
                prefill: run(2, 2),
                decode: dec(2, 1),
            },
            9.0,
        ),
        (
            Objective::Moves {
                weights: MoveCost {
                    start: 2.0,
                    stop: 0.5,
                    restart: 3.0,
                    gpu: 1.0,
                },
                prefill: run(1, 3),
                decode: dec(4, 1),
            },
            5.0,
        ),
    ]
}

fn all_cases() -> Vec<Scenario> {
    let mut out = Vec::new();
    for (o, demand) in objectives() {
        out.extend(single_type_cases(o, demand));
        out.extend(two_type_cases(o, demand));
    }
    out
}

#[test]
fn reduced_oracle_equals_full_enumeration() {
    let mut compared = 0;
    for sc in all_cases() {
        let c = Candidates::build(sc);
        let order = Order::new(&c);
        let (full, done) = search(&c, &order, None, false);
        let (reduced, done2) = search(&c, &order, None, true);
        assert!(done && done2);
        match (&full, &reduced) {
            (Some(a), Some(b)) => {
                assert_eq!(
                    order.cmp(&c, a, b),
                    Ordering::Equal,
                    "{:?}",
                    c.scenario.objective
                );
                compared += 1;
            }
            (None, None) => {}
            _ => panic!("one found a plan, the other not: {full:?} {reduced:?}"),
        }
    }
    assert!(compared > 200, "{compared}");
}

#[test]
fn hints_are_the_optimum_and_bounds_are_valid() {
    let mut exact = 0;
    for sc in all_cases() {
        let c = Candidates::build(sc);
        let order = Order::new(&c);
        let (best, _) = search(&c, &order, None, false);
        let h = hint(&c, &order);
        let Some(best) = best else {
            assert!(h.is_none());
            continue;
        };
        let h = h.expect("a hint whenever a plan exists");
        assert!(super::oracle::packs(&c.cluster, &c, &h), "the hint fits");
        if order.cmp(&c, &h, &best) == Ordering::Equal {
            exact += 1;
        } else {
            assert!(
                matches!(c.scenario.objective, Objective::TokensPerDollar),
                "{:?}",
                c.scenario.objective
            );
        }
        let values = order.values(&c, &best);
        let mut fixed = Vec::new();
        for (k, st) in order.stages.iter().enumerate() {
            if let (Some(b), Value::Int(v)) = (bound(&c, &order, k, &fixed), values[k]) {
                match st.sense {
                    Sense::Max => assert!(b >= v, "stage {k}: bound {b} < optimum {v}"),
                    Sense::Min => assert!(b <= v, "stage {k}: bound {b} > optimum {v}"),
                }
            }
            if let Value::Int(v) = values[k] {
                fixed.push(v);
            }
        }
    }
    assert!(exact > 200, "{exact}");
}

#[test]
fn node_awareness_changes_answers_for_sizes_that_do_not_divide_the_node() {
    // tp=5 on 8-GPU nodes: two of them never share a node, so 16 GPUs hold two, not three.
    let sc = scenario(
        vec![model(five(), &[h100()], loose(), 0.0)],
        vec![gpu_type("h100", Vendor::Nvidia, 0)],
        &[(0, 8, 2)],
        "nixl",
        Objective::Throughput,
    );
    let c = Candidates::build(sc);
    let order = Order::new(&c);
    let (best, _) = search(&c, &order, None, false);
    let best = best.unwrap()[0].unwrap();
    let size = |r: usize| c.rows[r].layout.tp;
    let fives = [
        (best.pair.prefill, best.prefill),
        (best.pair.decode, best.decode),
    ]
    .iter()
    .filter(|(r, _)| size(*r) == 5)
    .map(|(_, n)| n)
    .sum::<i64>();
    assert!(fives <= 2);
}

#[test]
fn fleet_oracle_fractions_and_weights() {
    let types = vec![gpu_type("h100", Vendor::Nvidia, 0)];
    let mut a = model(small(8), &[h100()], workload(), 30.0);
    let mut b = model(llama70(), &[h100()], workload(), 5.0);
    a.weight = 1.0;
    b.weight = 2.0;
    for objective in [Objective::MaxMin, Objective::Weighted] {
        let sc = scenario(
            vec![a.clone(), b.clone()],
            types.clone(),
            &[(0, 8, 1), (0, 4, 1)],
            "nixl",
            objective,
        );
        let c = Candidates::build(sc);
        let order = Order::new(&c);
        let (full, done) = search(&c, &order, None, false);
        let (reduced, _) = search(&c, &order, None, true);
        assert!(done);
        let (full, reduced) = (full.unwrap(), reduced.unwrap());
        assert_eq!(order.cmp(&c, &full, &reduced), Ordering::Equal);
        assert!(super::oracle::packs(&c.cluster, &c, &full));
    }
    // A demand far above what the pool serves still gets the pool (one fraction step).
    let huge = model(small(8), &[h100()], workload(), 1e30);
    let sc = scenario(vec![huge], types, &[(0, 8, 1)], "nixl", Objective::MaxMin);
    let c = Candidates::build(sc);
    let order = Order::new(&c);
    let (best, _) = search(&c, &order, None, true);
    assert!(best.unwrap()[0].is_some());
}

#[test]
fn one_pass_closed_forms_answer_as_each_closed_form_alone() {
    // The hint, each kind's best plan and the pair bounds from one pass (chain pairs reuse
    // their relaxed candidates, the others are searched best bound first and skipped when
    // their bound is worse than their kind's best) equal the three computed alone, over
    // partly free nodes, TP sizes that do not divide the node, two types, every objective.
    use super::relax::{best_of_kind, closed_forms, move_bounds, pair_bounds};
    let (mut skipped_work, mut loose) = (0, 0);
    for sc in all_cases() {
        let c = Candidates::build(sc);
        let order = Order::new(&c);
        let forms = closed_forms(&c, &order);
        assert_eq!(forms.hint, hint(&c, &order), "{:?}", c.scenario.objective);
        assert_eq!(forms.best_of_kind[0], best_of_kind(&c, &order, false));
        assert_eq!(forms.best_of_kind[1], best_of_kind(&c, &order, true));
        // A pair skipped by its O(1) bound keeps that bound: valid, never tighter than its
        // relaxed optimum; every other pair's is the relaxed optimum itself.
        let alone = pair_bounds(&c, &order).or_else(|| move_bounds(&c, &order));
        assert_eq!(forms.bounds.is_some(), alone.is_some());
        for (got, exact) in forms.bounds.iter().flatten().zip(alone.iter().flatten()) {
            match (got, exact, order.stages[0].sense) {
                (Some(g), Some(e), Sense::Max) => assert!(g >= e, "{g} < {e}"),
                (Some(g), Some(e), Sense::Min) => assert!(g <= e, "{g} > {e}"),
                (None, Some(e), _) => panic!("a pair with a relaxed plan ({e}) lost its bound"),
                _ => {}
            }
            loose += usize::from(got != exact);
        }
        skipped_work += usize::from(forms.bounds.is_some());
    }
    assert!(skipped_work > 200 && loose > 0, "{skipped_work} {loose}");
}

#[test]
fn competitive_pairs_keep_every_optimum() {
    // Given the hint as incumbent, the pairs left out are bounded below it: the full
    // enumeration's optimum uses a kept pair, and stage 0's bound covers its value.
    use super::relax::{closed_forms, competitive};
    let (mut pruned, mut checked, mut ratios) = (0, 0, 0);
    for sc in all_cases() {
        let c = Candidates::build(sc);
        let order = Order::new(&c);
        let forms = closed_forms(&c, &order);
        let (Some(bounds), Some(h)) = (forms.values.as_ref(), forms.hint.as_ref()) else {
            continue;
        };
        let (kept, first) = competitive(&c, &order, bounds, h).expect("a hint's pair");
        let (best, done) = search(&c, &order, None, false);
        assert!(done);
        let best = best.expect("a hint means a plan");
        let pair = best[0].unwrap().pair;
        assert!(
            kept.iter().any(|&i| c.pairs[i] == pair),
            "the optimum's pair was left out: {:?}",
            c.scenario.objective
        );
        assert!(kept.iter().any(|&i| c.pairs[i] == h[0].unwrap().pair));
        if let (Some(b), Value::Int(v)) = (first, order.values(&c, &best)[0]) {
            match order.stages[0].sense {
                Sense::Max => assert!(b >= v),
                Sense::Min => assert!(b <= v),
            }
        }
        pruned += c.pairs.len() - kept.len();
        checked += 1;
        ratios += usize::from(matches!(order.values(&c, &best)[0], Value::Ratio(..)));
    }
    assert!(
        checked > 250 && pruned > 1000 && ratios > 30,
        "{checked} {pruned} {ratios}"
    );
}

/// Single-type pools whose P/D pairs mix instance sizes that do not divide one another
/// (a 3- or 6-GPU pipeline next to 2- or 4-GPU tensor parallel, TP 5 next to TP 2 or 4) on
/// partly free nodes, where the per-size capacity cuts over-count what the nodes hold.
fn non_chain_cases() -> Vec<Scenario> {
    use crate::layout::Layout;
    let pp = |tp, pp| Layout {
        pp,
        ..Layout::tp(tp)
    };
    let spaces = [
        (small(4), vec![pp(1, 3), Layout::tp(2)]),
        (small(4), vec![pp(1, 3), Layout::tp(4)]),
        (small(4), vec![pp(2, 3), Layout::tp(4)]),
        (five(), vec![Layout::tp(5), Layout::tp(2)]),
        (five(), vec![Layout::tp(5), Layout::tp(4)]),
    ];
    let nodes: &[&[(usize, i64, i64)]] = &[
        &[(0, 6, 2)],
        &[(0, 7, 2)],
        &[(0, 6, 1), (0, 5, 1)],
        &[(0, 8, 1), (0, 7, 1), (0, 3, 1)],
        &[(0, 6, 3), (0, 2, 1)],
        &[(0, 6, 4)],
        &[(0, 7, 3)],
        &[(0, 5, 2), (0, 4, 1)],
        &[(0, 8, 2), (0, 6, 2)],
    ];
    let mut out = Vec::new();
    for (objective, demand) in [
        (Objective::Throughput, 0.0),
        (Objective::FewestGpus, 3.0),
        (Objective::Cost, 12.0),
    ] {
        for (perf, explicit) in &spaces {
            for &nodes in nodes {
                for connector in ["moriio", "nixl"] {
                    let m = model(*perf, &[h100()], loose(), demand);
                    let mut sc = scenario(
                        vec![m],
                        vec![gpu_type("h100", Vendor::Nvidia, 32_000)],
                        nodes,
                        connector,
                        objective,
                    );
                    sc.mode = Mode::Disaggregated;
                    sc.layouts = LayoutSpace {
                        families: None,
                        explicit: explicit.clone(),
                    };
                    out.push(sc);
                }
            }
        }
    }
    out
}

#[test]
fn closed_forms_search_sizes_that_do_not_divide_exactly() {
    // The closed forms reuse a pair's relaxed plans as its exact ones only where the cuts
    // are exact (chain sizes, two types). Here every pair of sizes that do not divide one
    // another is taken alone: its one-pass plan (hint and best of its kind) must be the
    // full enumeration's, and fit; the relaxed plan alone must not fit somewhere (else
    // treating such sizes as dividing would go unnoticed).
    use super::cluster::{chain, Fit};
    use super::relax::{best_over, closed_forms};
    let (mut pairs, mut overcounted) = (0, 0);
    for sc in non_chain_cases() {
        let full = Candidates::build(sc);
        for &pair in &full.pairs {
            let (a, b) = (&full.rows[pair.prefill], &full.rows[pair.decode]);
            let (ia, ib) = (a.item.unwrap(), b.item.unwrap());
            if ia.gpu_type != ib.gpu_type || chain(ia.piece, ib.piece) {
                continue;
            }
            let mut c = full.clone();
            c.pairs = vec![pair];
            let order = Order::new(&c);
            let forms = closed_forms(&c, &order);
            let (best, done) = search(&c, &order, None, false);
            assert!(done);
            match (&forms.hint, &best) {
                (Some(h), Some(best)) => {
                    assert!(super::oracle::packs(&c.cluster, &c, h), "the hint fits");
                    assert_eq!(order.cmp(&c, h, best), Ordering::Equal, "{pair:?}");
                }
                (None, None) => {}
                (h, best) => panic!("hint {h:?}, optimum {best:?}"),
            }
            assert_eq!(forms.best_of_kind[0], forms.hint);
            let relaxed = best_over(&c, &order, &[pair], Fit::Relaxed);
            if let Some(r) = relaxed {
                overcounted += usize::from(!super::oracle::packs(&c.cluster, &c, &r));
            }
            pairs += 1;
        }
    }
    assert!(pairs > 100 && overcounted > 3, "{pairs} {overcounted}");
}

#[test]
fn enumeration_proofs_equal_the_full_oracle() {
    // The proof by enumeration (plan::prove) over the competitive pairs equals the full
    // enumeration's optimum wherever it answers — from the closed forms' plan, and from a
    // feasible plan below it (one decode instance fewer), whose box is larger; it answers
    // for every objective whose first term it bounds (served, GPUs, cost, moves).
    use super::prove::enumerate;
    use super::relax::{closed_forms, competitive};
    let (mut proved, mut from_worse, mut moves) = (0, 0, 0);
    for sc in all_cases().into_iter().chain(non_chain_cases()) {
        let c = Candidates::build(sc);
        let order = Order::new(&c);
        let forms = closed_forms(&c, &order);
        let (Some(bounds), Some(h)) = (forms.values.as_ref(), forms.hint.as_ref()) else {
            continue;
        };
        let (best, done) = search(&c, &order, None, false);
        assert!(done);
        let best = best.expect("a hint means a plan");
        let mut worse = h.clone();
        if let Some(ch) = worse[0].as_mut().filter(|ch| !ch.pair.is_aggregated()) {
            ch.decode -= 1;
        }
        for (incumbent, count) in [(h, &mut proved), (&worse, &mut from_worse)] {
            if super::feasible::feasible(&c, incumbent) != Some(true) {
                continue;
            }
            let (kept, _) = competitive(&c, &order, bounds, incumbent).unwrap();
            let Some(got) = enumerate(&c, &order, &kept, incumbent, None, 1 << 20) else {
                let lead = order.lex[0].0;
                assert!(
                    !matches!(lead, Term::Served | Term::Gpus | Term::Cost | Term::Moves),
                    "no answer for {:?}",
                    c.scenario.objective
                );
                continue;
            };
            assert_eq!(super::feasible::feasible(&c, &got), Some(true));
            assert_eq!(
                order.cmp(&c, &got, &best),
                Ordering::Equal,
                "{:?}",
                c.scenario.objective
            );
            *count += 1;
            moves += usize::from(order.lex[0].0 == Term::Moves);
        }
    }
    assert!(
        proved > 200 && from_worse > 100 && moves > 20,
        "{proved} {from_worse} {moves}"
    );
}

#[test]
fn stage_bounds_hold_on_pools_too_large_to_merge_stages() {
    // On large pools "most served" cannot share a stage with its tie-breakers (the merged
    // range would pass 2^53), and the relaxation bounds the second stage by the fewest
    // counts that serve the first stage's value. That bound must not exceed the optimum's
    // (the enumeration proof's plan, which equals the full oracle where that finishes).
    use super::prove::enumerate;
    use super::relax::{closed_forms, competitive};
    let mut checked = 0;
    for count in [512, 8192] {
        for (perf, w) in [
            (llama70(), workload()),
            (small(4), workload()),
            (five(), loose()),
        ] {
            for connector in ["moriio", "nixl"] {
                let sc = scenario(
                    vec![model(perf, &[h100()], w, 0.0)],
                    vec![gpu_type("h100", Vendor::Nvidia, 32_000)],
                    &[(0, 8, count), (0, 5, 3)],
                    connector,
                    Objective::Throughput,
                );
                let c = Candidates::build(sc);
                let order = Order::new(&c);
                if order.stages.len() < 2 || order.stages[0].terms != [(Term::Served, 1)] {
                    continue;
                }
                let forms = closed_forms(&c, &order);
                let (Some(bounds), Some(h)) = (forms.values.as_ref(), forms.hint.as_ref()) else {
                    continue;
                };
                let (kept, _) = competitive(&c, &order, bounds, h).unwrap();
                let best = enumerate(&c, &order, &kept, h, None, 1 << 22).expect("a proof");
                let values = order.values(&c, &best);
                let mut fixed = Vec::new();
                for (k, st) in order.stages.iter().enumerate() {
                    let Value::Int(v) = values[k] else { break };
                    if let Some(b) = bound(&c, &order, k, &fixed) {
                        match st.sense {
                            Sense::Max => assert!(b >= v, "stage {k}: bound {b} < optimum {v}"),
                            Sense::Min => assert!(b <= v, "stage {k}: bound {b} > optimum {v}"),
                        }
                        checked += usize::from(k == 1);
                    }
                    fixed.push(v);
                }
            }
        }
    }
    assert!(checked >= 4, "{checked}");
}

#[test]
fn move_bounds_hold_for_every_pair_when_a_running_side_left_the_pool() {
    // A re-plan's per-pair lower bound (relax::move_bounds) must not exceed the best plan
    // of that pair alone (the full enumeration over it), also when a running side's layout
    // is no longer in the pool (it stops and restarts elsewhere, whatever is chosen).
    use super::candidates::Role;
    use super::relax::move_bounds;
    use crate::layout::Layout;
    let side = |role, tp, n| Running {
        gpu_type: Some(0),
        role,
        layout: Layout::tp(tp),
        instances: n,
    };
    let mut checked = 0;
    for (prefill, decode) in [
        (side(Role::Prefill, 16, 2), side(Role::Decode, 2, 2)),
        (side(Role::Prefill, 2, 1), side(Role::Decode, 16, 1)),
        (side(Role::Prefill, 16, 1), side(Role::Decode, 16, 3)),
    ] {
        for nodes in [&[(0, 8, 2)][..], &[(0, 8, 1), (0, 5, 2)]] {
            let weights = MoveCost {
                start: 1.0,
                stop: 2.0,
                restart: 3.0,
                gpu: 0.5,
            };
            let objective = Objective::Moves {
                weights,
                prefill,
                decode,
            };
            let m = model(small(4), &[h100()], workload(), 6.0);
            let sc = scenario(
                vec![m],
                vec![gpu_type("h100", Vendor::Nvidia, 32_000)],
                nodes,
                "nixl",
                objective,
            );
            let full = Candidates::build(sc);
            let order = Order::new(&full);
            let Some(bounds) = move_bounds(&full, &order) else {
                continue;
            };
            for (i, &pair) in full.pairs.iter().enumerate() {
                let mut c = full.clone();
                c.pairs = vec![pair];
                let (best, done) = search(&c, &order, None, false);
                assert!(done);
                let Some(best) = best else { continue };
                let (Some(b), Value::Int(v)) = (bounds[i], order.values(&c, &best)[0]) else {
                    continue;
                };
                assert!(b <= v, "pair {pair:?}: bound {b} > its best {v}");
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "{checked}");
}
