use super::*;
use crate::perf::serving::{serving, Engine, ServingWorkload};
use crate::perf::tests::{consts, h100, llama70};
use crate::perf::{
    admission_delay, decode_step_time, kv_transfer_time, prefill_time, step_time, Constants,
    StepBatch,
};

fn pool(tp: i64, instances: u32) -> Pool {
    Pool {
        model: llama70(),
        gpu: h100(),
        constants: consts(),
        layout: Layout::tp(tp),
        instances,
        gpu_memory_utilization: 0.9,
        max_num_seqs: 1024,
        max_num_batched_tokens: 8192,
    }
}

fn disagg(np: u32, nd: u32) -> Config {
    Config {
        deployment: Deployment::Disaggregated {
            prefill: pool(4, np),
            decode: pool(8, nd),
        },
        router: Router::RoundRobin,
        slo: Slo {
            ttft: Some(2.0),
            tpot: Some(0.05),
        },
    }
}

fn agg(tp: i64, instances: u32) -> Config {
    Config {
        deployment: Deployment::Aggregated(pool(tp, instances)),
        router: Router::LeastLoaded,
        slo: Slo {
            ttft: Some(2.0),
            tpot: Some(0.05),
        },
    }
}

fn open(n: usize, rate: f64, lengths: Lengths, seed: u64) -> Requests {
    Requests::generate(&lengths, n, seed)
        .unwrap()
        .at_rate(&Arrival::Poisson, rate, seed)
        .unwrap()
}

const FIXED: Lengths = Lengths::Fixed {
    isl: 2048,
    osl: 256,
};
const RANGE: Lengths = Lengths::Uniform {
    isl: 2048,
    osl: 256,
    low: 0.5,
    high: 1.0,
};

/// L = λ·W over the run: the time-integral of requests in the system (kept event by event)
/// equals the sum of their times in it (kept request by request), so a lost, duplicated or
/// mis-timed request breaks it.
fn assert_littles_law(r: &SimResult) {
    let lambda_w = r.throughput_rps * r.e2e.mean;
    assert!(
        (r.mean_in_system - lambda_w).abs() <= 1e-6 * lambda_w.max(1e-9),
        "L = {} but λW = {lambda_w}",
        r.mean_in_system
    );
}

#[test]
fn every_request_finishes_once_and_littles_law_holds() {
    for (cfg, rate) in [
        (disagg(2, 1), 4.0),
        (disagg(2, 2), 40.0), // overloaded: queues grow, nothing is lost
        (agg(8, 2), 6.0),
    ] {
        let reqs = open(3000, rate, RANGE, 3);
        let r = simulate(&cfg, &Load::Open, &reqs).unwrap();
        assert_eq!(r.requests, 3000);
        assert_eq!(r.ttft_sorted.len(), 3000);
        assert!(r.ttft.p50 > 0.0 && r.e2e.p50 >= r.ttft.p50);
        assert_littles_law(&r);
    }
    let reqs = Requests::generate(&RANGE, 2000, 1).unwrap();
    let r = simulate(&disagg(1, 1), &Load::Closed { concurrency: 64 }, &reqs).unwrap();
    assert_eq!(r.requests, 2000);
    assert_littles_law(&r);
    // A closed loop never has more than `concurrency` requests in the system.
    assert!(r.mean_in_system <= 64.0 + 1e-9);
}

#[test]
fn same_seed_same_result_other_seed_differs() {
    let cfg = disagg(2, 1);
    let a = simulate(&cfg, &Load::Open, &open(2000, 5.0, RANGE, 11)).unwrap();
    let b = simulate(&cfg, &Load::Open, &open(2000, 5.0, RANGE, 11)).unwrap();
    assert_eq!(a, b);
    let c = simulate(&cfg, &Load::Open, &open(2000, 5.0, RANGE, 12)).unwrap();
    assert_ne!(a.ttft, c.ttft);
}

#[test]
fn more_load_never_lowers_the_tail() {
    let cfg = disagg(2, 1);
    let mut last = (0.0, 0.0);
    for rate in [1.0, 2.0, 4.0, 6.0, 8.0, 12.0] {
        let r = simulate(&cfg, &Load::Open, &open(3000, rate, FIXED, 5)).unwrap();
        assert!(r.ttft.p90 >= last.0 - 1e-12, "rate {rate}: p90 TTFT fell");
        assert!(r.tpot.p90 >= last.1 - 1e-12, "rate {rate}: p90 TPOT fell");
        last = (r.ttft.p90, r.tpot.p90);
    }
}

#[test]
fn at_low_load_the_analytic_model_is_reproduced() {
    // One request at a time: TTFT = the admission delay (request overhead + the scheduling
    // wait in steps of the idle instance) + prefill + KV transfer + the decode instance's
    // first step (it recomputes the last prompt token); TPOT = the decode step at batch 1
    // over the mean context.
    let (m, g) = (llama70(), h100());
    let c = Constants {
        api_overhead: 0.03,
        schedule_wait_steps: 2.5,
        first_wave_stall: 0.0,
        ..consts()
    };
    let with = |mut cfg: Config| {
        match &mut cfg.deployment {
            Deployment::Aggregated(p) => p.constants = c,
            Deployment::Disaggregated { prefill, decode } => {
                prefill.constants = c;
                decode.constants = c;
            }
        }
        cfg
    };
    let idle = |tp| step_time(&m, &g, &c, &Layout::tp(tp), &StepBatch::default());
    let reqs = Requests::generate(&FIXED, 50, 0).unwrap();
    let r = simulate(&with(disagg(1, 1)), &Load::Closed { concurrency: 1 }, &reqs).unwrap();
    let ttft = admission_delay(&c, idle(4))
        + prefill_time(&m, &g, &c, 4, 2048.0)
        + kv_transfer_time(&m, &c, 4, 2048.0)
        + decode_step_time(&m, &g, &c, 8, 1.0, 2048.0);
    let tpot = decode_step_time(&m, &g, &c, 8, 1.0, 2048.0 + 256.0 / 2.0);
    assert!(
        (r.ttft.mean / ttft - 1.0).abs() < 0.02,
        "{} vs {ttft}",
        r.ttft.mean
    );
    assert!(
        (r.tpot.mean / tpot - 1.0).abs() < 0.02,
        "{} vs {tpot}",
        r.tpot.mean
    );
    // Aggregated: the prompt is one step (2048 tokens fit the 8192 budget).
    let r = simulate(&with(agg(8, 1)), &Load::Closed { concurrency: 1 }, &reqs).unwrap();
    let p = admission_delay(&c, idle(8)) + prefill_time(&m, &g, &c, 8, 2048.0);
    assert!(
        (r.ttft.mean / p - 1.0).abs() < 1e-9,
        "{} vs {p}",
        r.ttft.mean
    );
    // The aggregated mean-value model (perf v2) agrees at one client: its TTFT and TPOT.
    let long = Lengths::Fixed {
        isl: 2048,
        osl: 1024,
    };
    let reqs = Requests::generate(&long, 30, 0).unwrap();
    let r = simulate(&with(agg(8, 1)), &Load::Closed { concurrency: 1 }, &reqs).unwrap();
    let w = ServingWorkload {
        isl: 2048.0,
        osl: 1024.0,
        concurrency: Some(1.0),
        num_prompts: f64::INFINITY,
        max_num_seqs: 1024.0,
        max_num_batched_tokens: 8192.0,
        gpu_memory_utilization: 0.9,
        engine: Engine::Vllm,
        scheduler_recv_interval: 1.0,
    };
    let a = serving(&m, &g, &c, &Layout::tp(8), &w).unwrap();
    for (sim, model) in [(r.ttft.mean, a.ttft_steady), (r.tpot.mean, a.tpot)] {
        assert!((sim / model - 1.0).abs() < 0.02, "{sim} vs {model}");
    }
}

#[test]
fn long_prompts_are_chunked_by_the_token_budget() {
    let mut cfg = agg(8, 1);
    let Deployment::Aggregated(ref mut p) = cfg.deployment else {
        unreachable!()
    };
    p.max_num_batched_tokens = 1024;
    let reqs = Requests::generate(&FIXED, 4, 0).unwrap();
    let r = simulate(&cfg, &Load::Closed { concurrency: 1 }, &reqs).unwrap();
    // 2048 prompt tokens take two steps of 1024; every other step decodes one token.
    assert_eq!(r.sides[0].steps, 4 * (2 + 255));
    let whole = prefill_time(&llama70(), &h100(), &consts(), 8, 2048.0);
    assert!(
        r.ttft.mean > whole,
        "chunking pays the per-step overhead twice"
    );
}

#[test]
fn tight_kv_memory_preempts_and_still_serves_everything() {
    // Little memory: 70B bf16 on tp2 H100 at 0.6 utilisation leaves room for few sequences.
    let mut cfg = agg(2, 1);
    let Deployment::Aggregated(ref mut p) = cfg.deployment else {
        unreachable!()
    };
    p.gpu_memory_utilization = 0.975;
    let blocks = p.kv_blocks();
    let lengths = Lengths::Fixed {
        isl: 512,
        osl: 1024,
    };
    let per_req = (512 + 1024) / 16;
    let reqs = Requests::generate(&lengths, 400, 0).unwrap();
    let conc = (3 * blocks / per_req) as u32; // three times what fits at full length
    let r = simulate(&cfg, &Load::Closed { concurrency: conc }, &reqs).unwrap();
    assert_eq!(r.requests, 400);
    assert!(
        r.sides[0].preemptions > 0,
        "expected preemptions with {blocks} blocks"
    );
    assert_littles_law(&r);
}

#[test]
fn decode_admission_waits_for_blocks_and_prefill_holds_kv() {
    // One small decode instance behind two prefill instances: decode-side queueing shows.
    let cfg = disagg(2, 1);
    let r = simulate(&cfg, &Load::Open, &open(2000, 30.0, FIXED, 2)).unwrap();
    assert!(r.sides[1].queue_max > 0);
    assert!(r.sides[1].utilization > 0.5);
    assert!(r.throughput_rps < 30.0);
}

#[test]
fn a_request_longer_than_the_kv_cache_is_refused() {
    let reqs = Requests::generate(
        &Lengths::Fixed {
            isl: 4_000_000,
            osl: 10,
        },
        1,
        0,
    )
    .unwrap();
    let e = simulate(&agg(8, 1), &Load::Closed { concurrency: 1 }, &reqs).unwrap_err();
    assert!(e.message.contains("KV-cache blocks"), "{}", e.message);
}

#[test]
fn bad_inputs_name_the_field() {
    let mut cfg = agg(8, 1);
    let Deployment::Aggregated(ref mut p) = cfg.deployment else {
        unreachable!()
    };
    p.max_num_batched_tokens = 100;
    p.max_num_seqs = 256;
    let reqs = Requests::generate(&FIXED, 1, 0).unwrap();
    let e = simulate(&cfg, &Load::Closed { concurrency: 1 }, &reqs).unwrap_err();
    assert!(e.message.contains("max_num_batched_tokens (100)"));
    assert!(Requests::generate(&FIXED, 0, 0).is_err());
    assert!(Requests::generate(&FIXED, MAX_REQUESTS + 1, 0).is_err());
    let e = Requests::generate(&FIXED, 10, 0)
        .unwrap()
        .at_rate(&Arrival::Poisson, 0.0, 0)
        .unwrap_err();
    assert!(e.message.contains("rate_rps"));
    let big = Requests::generate(
        &Lengths::Fixed {
            isl: 10,
            osl: 1 << 20,
        },
        1000,
        0,
    )
    .unwrap();
    let e = simulate(&agg(8, 1), &Load::Closed { concurrency: 1 }, &big).unwrap_err();
    assert!(e.message.contains("output tokens"), "{}", e.message);
}

#[test]
fn least_loaded_beats_round_robin_on_skewed_lengths() {
    let mut rr = agg(8, 4);
    rr.router = Router::RoundRobin;
    let ll = agg(8, 4);
    let lengths = Lengths::Uniform {
        isl: 4096,
        osl: 1024,
        low: 0.05,
        high: 1.0,
    };
    let reqs = open(3000, 6.0, lengths, 9);
    let a = simulate(&rr, &Load::Open, &reqs).unwrap();
    let b = simulate(&ll, &Load::Open, &reqs).unwrap();
    assert!(b.e2e.p99 <= a.e2e.p99, "{} vs {}", b.e2e.p99, a.e2e.p99);
}

#[test]
fn the_rate_search_brackets_the_slo_boundary() {
    let cfg = disagg(2, 1);
    let opts = SearchOptions {
        percentile: 0.9,
        requests: 1500,
        lengths: FIXED,
        arrival: Arrival::Poisson,
        seed: 0,
        rel_tol: 0.02,
        growth: GROWTH,
        hint_rps: None,
    };
    let s = max_rate_within_slo(&cfg, &opts).unwrap();
    assert!(s.rate_rps > 0.0 && s.failing_rps / s.rate_rps <= 1.02 + 1e-12);
    assert!(s.result.as_ref().unwrap().meets_slo_at(0.9));
    let again = |rate: f64| {
        let reqs = Requests::generate(&FIXED, 1500, 0)
            .unwrap()
            .at_rate(&Arrival::Poisson, rate, 0)
            .unwrap();
        simulate(&cfg, &Load::Open, &reqs)
            .unwrap()
            .meets_slo_at(0.9)
    };
    assert!(again(s.rate_rps) && !again(s.failing_rps));
    // A tighter percentile can only lower the rate.
    let p99 = max_rate_within_slo(
        &cfg,
        &SearchOptions {
            percentile: 0.99,
            ..opts
        },
    )
    .unwrap();
    assert!(p99.rate_rps <= s.failing_rps);
    // Impossible SLO: zero, not a hang.
    let mut tight = cfg;
    tight.slo.ttft = Some(1e-4);
    assert_eq!(max_rate_within_slo(&tight, &opts).unwrap().rate_rps, 0.0);
}

#[test]
fn prefill_preemptions_touch_only_their_own_instance() {
    // Little KV on both sides: decode instances admit slowly, so prefill instances hold the KV
    // of finished prompts and preempt their running ones, while requests they prefilled
    // earlier decode elsewhere under the same epoch.
    let mut prefill = pool(4, 2);
    prefill.max_num_batched_tokens = 2048;
    let mut decode = pool(8, 1);
    let mut cfg = Config {
        deployment: Deployment::Disaggregated { prefill, decode },
        router: Router::RoundRobin,
        slo: Slo::default(),
    };
    // Shrink the prefill KV to about four prompts of 3,000 tokens.
    let target_blocks = 4 * 3000 / 16;
    let mut util = 0.9;
    while prefill.kv_blocks() > target_blocks && util > 0.3 {
        util -= 0.0005;
        prefill.gpu_memory_utilization = util;
    }
    // And the decode KV to about ten whole requests.
    let mut util = 0.9;
    while decode.kv_blocks() > 10 * 3400 / 16 && util > 0.1 {
        util -= 0.0005;
        decode.gpu_memory_utilization = util;
    }
    cfg.deployment = Deployment::Disaggregated { prefill, decode };
    let lengths = Lengths::Uniform {
        isl: 3000,
        osl: 400,
        low: 0.5,
        high: 1.0,
    };
    let reqs = open(1500, 25.0, lengths, 4);
    let r = simulate(&cfg, &Load::Open, &reqs).unwrap();
    assert!(
        r.sides[0].preemptions > 0,
        "no prefill preemptions with {} blocks",
        prefill.kv_blocks()
    );
    assert_eq!(r.requests, 1500);
    assert_littles_law(&r);
}

#[test]
fn burstiness_is_bounded() {
    for shape in [0.0, 1e-4, 2e3, f64::NAN, f64::INFINITY] {
        let e = Requests::unit_arrivals(&Arrival::Gamma { shape }, 10, 0).unwrap_err();
        assert!(e.message.contains("burstiness"), "{shape}: {}", e.message);
    }
    for shape in [1e-3, 1.0, 1e3] {
        let a = Requests::unit_arrivals(&Arrival::Gamma { shape }, 1000, 0).unwrap();
        let mean_gap = a[999] / 999.0;
        assert!(mean_gap > 0.0 && mean_gap < 10.0, "{shape}: {mean_gap}");
    }
}

fn layout_pool(model: crate::perf::ModelPerf, layout: Layout, instances: u32) -> Pool {
    Pool {
        model,
        layout,
        instances,
        ..pool(1, 1)
    }
}

fn moe() -> crate::perf::ModelPerf {
    crate::perf::tests::moe_mla()
}

/// The layouts of every plan kind: DP attention + EP, EP inside a TP group, PP, dense DP,
/// on the MoE model (16 GPUs hold it) and the dense one.
fn kinds() -> Vec<(crate::perf::ModelPerf, Layout)> {
    let l = |s: &str| Layout::parse(s).unwrap();
    vec![
        (moe(), l("tp1dp16ep")),
        (moe(), l("tp2dp8ep")),
        (moe(), l("tp8dp2ep")),
        (moe(), l("tp8pp2")),
        (llama70(), l("tp4pp2")),
        (llama70(), l("tp2dp2")),
        (llama70(), l("tp8")),
    ]
}

#[test]
fn every_layout_at_low_load_reproduces_the_analytic_model() {
    // One client: TTFT and TPOT are the performance model's step times of the layout (the
    // DP rank's batch of one request; a micro-batch through every stage), for aggregated
    // instances and for P/D sides of any layout.
    let c = Constants {
        api_overhead: 0.03,
        schedule_wait_steps: 2.5,
        first_wave_stall: 0.0,
        ..consts()
    };
    let g = h100();
    let slo = Slo::default();
    let reqs = Requests::generate(&FIXED, 40, 0).unwrap();
    let close = |sim: f64, model: f64, what: &str| {
        assert!((sim / model - 1.0).abs() < 0.02, "{what}: {sim} vs {model}");
    };
    for (m, layout) in kinds() {
        let step = |b: &StepBatch| step_time(&m, &g, &c, &layout, b);
        let idle = step(&StepBatch::default());
        let tpot = step(&StepBatch::decode(1.0, 2048.0 + 256.0 / 2.0));
        // Under EP the same step on the TP-only layout of the same TP size is a different
        // number, so a simulator that ignored the layout fails here (dense DP ranks and one
        // micro-batch through a pipeline take about the TP-only time: the next test
        // catches their schedulers).
        let tp_only = step_time(
            &m,
            &g,
            &c,
            &Layout::tp(layout.tp),
            &StepBatch::decode(1.0, 2176.0),
        );
        if layout.ep {
            assert!(
                (tp_only / tpot - 1.0).abs() > 0.05,
                "{layout}: not discriminating"
            );
        }
        let p = Pool {
            constants: c,
            ..layout_pool(m, layout, 1)
        };
        let cfg = Config {
            deployment: Deployment::Aggregated(p),
            router: Router::RoundRobin,
            slo,
        };
        let r = simulate(&cfg, &Load::Closed { concurrency: 1 }, &reqs).unwrap();
        let ttft = admission_delay(&c, idle) + step(&StepBatch::prefill(2048.0));
        close(r.ttft.mean, ttft, &format!("aggregated {layout} TTFT"));
        close(r.tpot.mean, tpot, &format!("aggregated {layout} TPOT"));
        assert_eq!(cfg.gpus(), layout.gpus());

        // P/D: this layout decodes behind a TP-only prefill (and prefills for one).
        let tp_pool = |m| Pool {
            constants: c,
            ..layout_pool(m, Layout::tp(8), 2)
        };
        let pd = Config {
            deployment: Deployment::Disaggregated {
                prefill: if m == llama70() { tp_pool(m) } else { p },
                decode: p,
            },
            router: Router::RoundRobin,
            slo,
        };
        let prefill = match pd.deployment {
            Deployment::Disaggregated { prefill, .. } => prefill,
            _ => unreachable!(),
        };
        let r = simulate(&pd, &Load::Closed { concurrency: 1 }, &reqs).unwrap();
        let pstep = |b: &StepBatch| prefill.step_time(b);
        let ttft = admission_delay(&c, pstep(&StepBatch::default()))
            + pstep(&StepBatch::prefill(2048.0))
            + kv_transfer_time(&m, &c, prefill.layout.tp, 2048.0)
            + step(&StepBatch::decode(1.0, 2048.0));
        close(r.ttft.mean, ttft, &format!("P/D decode {layout} TTFT"));
        close(r.tpot.mean, tpot, &format!("P/D decode {layout} TPOT"));
    }
}

#[test]
fn data_parallel_ranks_and_pipeline_lanes_each_run_their_own_batch() {
    // As many clients as schedulers (DP ranks × pipeline lanes): each gets its own, so
    // every step still carries one sequence (TPOT as at one client) and the instance serves
    // that many times one client's rate. Sent all to one scheduler they would share a batch.
    let slo = Slo::default();
    let reqs = Requests::generate(&FIXED, 400, 0).unwrap();
    for (m, layout) in kinds() {
        let lanes = (layout.dp * layout.pp) as u32;
        let cfg = Config {
            deployment: Deployment::Aggregated(layout_pool(m, layout, 1)),
            router: Router::RoundRobin,
            slo,
        };
        let one = simulate(&cfg, &Load::Closed { concurrency: 1 }, &reqs).unwrap();
        let all = simulate(&cfg, &Load::Closed { concurrency: lanes }, &reqs).unwrap();
        let side = &all.sides[0];
        assert!(
            (side.mean_decode_batch - one.sides[0].mean_decode_batch).abs() < 0.05,
            "{layout}: batch {} vs {}",
            side.mean_decode_batch,
            one.sides[0].mean_decode_batch
        );
        let ratio = all.throughput_rps / one.throughput_rps;
        assert!(
            (ratio / f64::from(lanes) - 1.0).abs() < 0.05,
            "{layout}: {lanes} schedulers serve {ratio}x one client"
        );
    }
}

#[test]
fn pipeline_lanes_share_their_ranks_kv_cache() {
    // Two lanes of one rank draw on one pool of blocks: with room for about one request in
    // all, the lanes take turns (nothing is lost, nothing is preempted forever), and the
    // pool reported is the rank's.
    let m = llama70();
    let mut p = layout_pool(m, Layout::parse("tp4pp2").unwrap(), 1);
    let full = p.kv_blocks();
    let tp_only = layout_pool(m, Layout::tp(4), 1).kv_blocks();
    // Each stage holds half the layers: twice the tokens of TP-only at the same TP (less
    // the weights each stage no longer holds: more still).
    assert!(full > 2 * tp_only, "{full} vs {tp_only}");
    let need = (2048 + 256) / 16 + 1;
    // Shrink memory until the rank holds ~1.5 requests.
    while p.kv_blocks() > need * 3 / 2 {
        p.gpu_memory_utilization -= 0.0005;
    }
    let cfg = Config {
        deployment: Deployment::Aggregated(p),
        router: Router::RoundRobin,
        slo: Slo::default(),
    };
    let reqs = Requests::generate(&FIXED, 60, 0).unwrap();
    let r = simulate(&cfg, &Load::Closed { concurrency: 8 }, &reqs).unwrap();
    assert_eq!(r.requests, 60);
    assert!(
        r.sides[0].mean_decode_batch <= 1.5,
        "{}",
        r.sides[0].mean_decode_batch
    );
    assert_eq!(r.sides[0].kv_blocks, p.kv_blocks());
}

#[test]
fn too_many_schedulers_are_refused_naming_the_product() {
    let mut p = layout_pool(moe(), Layout::parse("tp1dp16ep").unwrap(), 5000);
    p.instances = 5000;
    let cfg = Config {
        deployment: Deployment::Aggregated(p),
        router: Router::RoundRobin,
        slo: Slo::default(),
    };
    let e = cfg.validate().unwrap_err();
    assert!(e.message.contains("instances × dp × pp"), "{}", e.message);
}

#[test]
fn a_closed_loops_first_wave_waits_out_the_warm_up_and_the_rest_does_not() {
    // Every client's first request waits the engine's one-off warm-up stall S, as
    // `predict_serving`'s mean TTFT charges it: the mean TTFT over N requests rises by about
    // C / N · S (the first wave's own prefill burst is the same either way), the median not.
    let reqs = Requests::generate(&FIXED, 320, 1).unwrap();
    let load = Load::Closed { concurrency: 32 };
    let base = simulate(&agg(8, 1), &load, &reqs).unwrap();
    let mut cfg = agg(8, 1);
    if let Deployment::Aggregated(p) = &mut cfg.deployment {
        p.constants = Constants {
            first_wave_stall: 2.0,
            ..p.constants
        };
    }
    let stalled = simulate(&cfg, &load, &reqs).unwrap();
    let added = stalled.ttft.mean - base.ttft.mean;
    assert!((added - 32.0 / 320.0 * 2.0).abs() < 0.05, "{added}");
    assert!((stalled.ttft.p50 - base.ttft.p50).abs() < 0.1 * base.ttft.p50);
    // An open loop has no first wave.
    let open_reqs = open(200, 2.0, FIXED, 2);
    let a = simulate(&agg(8, 1), &Load::Open, &open_reqs).unwrap();
    let b = simulate(&cfg, &Load::Open, &open_reqs).unwrap();
    assert_eq!(a.ttft.mean, b.ttft.mean);
}
