//! The event loop and each instance's scheduler (vLLM V1's `Scheduler.schedule`, step by
//! step). See the module documentation of [`super`] for what is modelled.
//!
//! Decoding sequences are never visited one by one. A sequence that holds `c` tokens of KV
//! before step `k` needs a new block in that step iff `c % 16 == 0`; its `c` grows by one per
//! step, so whether it needs a block at step `k` depends only on `(k − c) mod 16`, its
//! *phase*, which never changes while it decodes. Each instance keeps the count of decoding
//! sequences per phase, their number and their summed context, and a heap of the step at
//! which each one finishes: a step costs O(1), a request O(log n).

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use super::requests::{Load, Requests};
use super::stats::{Percentiles, SideStats, SimResult};
use super::{Config, Deployment, Pool, Router, SimError, BLOCK_SIZE};
use crate::perf::{self, StepBatch};

const PHASES: usize = BLOCK_SIZE as usize;

fn blocks(tokens: u32) -> u64 {
    u64::from(tokens.div_ceil(BLOCK_SIZE))
}

fn phase(k0: u64, c0: u32) -> usize {
    (k0.wrapping_sub(u64::from(c0)) % PHASES as u64) as usize
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not arrived yet.
    Pending,
    /// In an instance's waiting queue, to be (re)computed from its prompt.
    Queued,
    /// Prompt done on a prefill instance; waiting in a decode instance's queue for KV blocks.
    RemoteQueued,
    /// Its KV is being read by the decode instance.
    Transferring,
    /// KV read; waiting for a seat in the decode instance's batch.
    Ready,
    /// Running, part of its prompt (or recomputation) done.
    Prefilling,
    /// Running, one token per step.
    Decoding,
    Finished,
}

#[derive(Debug, Clone, Copy)]
struct Req {
    arrival: f64,
    first_token: f64,
    finish: f64,
    isl: u32,
    osl: u32,
    /// Output tokens produced; for a decoding sequence, those produced before step `k0`.
    generated: u32,
    /// Tokens to compute before the next token is sampled (prompt, or prompt + outputs
    /// after a preemption), and how many of them are done.
    target: u32,
    done: u32,
    /// Decoding: KV tokens held before step `k0`.
    c0: u32,
    k0: u64,
    /// Bumped at each preemption: stale running-list and finish-heap entries are skipped.
    epoch: u32,
    /// The instance it is queued or running on.
    inst: u32,
    /// The prefill instance holding its KV until the decode instance has read it.
    holder: u32,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Aggregated,
    Prefill,
    Decode,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A client sends the request.
    Arrival(u32),
    /// The request reaches its instance's scheduler (after the admission delay).
    Admit(u32),
    StepEnd(u32),
    TransferDone(u32),
    /// Start a step on an idle instance once every event of this instant has been seen.
    Wake(u32),
}

#[derive(Debug, Clone, Copy)]
struct Event {
    time: f64,
    /// Events of one instant run in class order: arrivals and completions first, wake-ups
    /// last, so a burst of simultaneous arrivals lands in one batch.
    class: u8,
    seq: u64,
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    /// Reversed: `BinaryHeap` pops the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time
            .total_cmp(&self.time)
            .then(other.class.cmp(&self.class))
            .then(other.seq.cmp(&self.seq))
    }
}

struct Instance {
    /// This instance's index (a request's `inst` when queued or running here).
    id: u32,
    role: Role,
    /// 0: the entry side (aggregated or prefill), 1: decode.
    side: usize,
    /// The KV pool it allocates from (`Sim::free`): one per DP rank, shared by the rank's
    /// pipeline micro-batch lanes.
    kv: usize,
    max_seqs: u32,
    max_tokens: u32,
    waiting: VecDeque<u32>,
    /// Decode instances: requests whose KV has arrived.
    ready: VecDeque<u32>,
    /// Running requests in admission order, `(id, epoch)`; stale entries are skipped.
    running: Vec<(u32, u32)>,
    running_count: u32,
    /// Running requests with prompt tokens left, in admission order.
    prefilling: VecDeque<u32>,
    n_decode: u32,
    /// Σ KV tokens held by the decoding sequences before the next step.
    ctx_sum: u64,
    per_phase: [u32; PHASES],
    /// `(step at whose end it finishes, id, epoch)`.
    finishes: BinaryHeap<Reverse<(u64, u32, u32)>>,
    /// Index of the next (or current) step.
    step: u64,
    busy: bool,
    wake_pending: bool,
    /// This step's prompt chunks `(id, tokens)` and the sequences that joined to decode.
    chunks: Vec<(u32, u32)>,
    joined: Vec<u32>,
    /// Requests sent here and not yet gone (the least-loaded router's measure).
    outstanding: u32,
    busy_time: f64,
    steps: u64,
    step_tokens: u64,
    decode_seq_steps: u64,
    preemptions: u64,
}

impl Instance {
    fn new(id: u32, role: Role, side: usize, kv: usize, pool: &Pool) -> Instance {
        Instance {
            id,
            role,
            side,
            kv,
            max_seqs: pool.max_num_seqs,
            max_tokens: pool.max_num_batched_tokens,
            waiting: VecDeque::new(),
            ready: VecDeque::new(),
            running: Vec::new(),
            running_count: 0,
            prefilling: VecDeque::new(),
            n_decode: 0,
            ctx_sum: 0,
            per_phase: [0; PHASES],
            finishes: BinaryHeap::new(),
            step: 0,
            busy: false,
            wake_pending: false,
            chunks: Vec::new(),
            joined: Vec::new(),
            outstanding: 0,
            busy_time: 0.0,
            steps: 0,
            step_tokens: 0,
            decode_seq_steps: 0,
            preemptions: 0,
        }
    }

    fn add_decoding(&mut self, r: &mut Req, id: u32, c0: u32, k0: u64) {
        r.state = State::Decoding;
        r.c0 = c0;
        r.k0 = k0;
        self.n_decode += 1;
        self.ctx_sum += u64::from(c0);
        self.per_phase[phase(k0, c0)] += 1;
        let finish = k0 + u64::from(r.osl - r.generated) - 1;
        self.finishes.push(Reverse((finish, id, r.epoch)));
    }

    fn remove_decoding(&mut self, r: &Req, c: u32) {
        self.n_decode -= 1;
        self.ctx_sum -= u64::from(c);
        self.per_phase[phase(r.k0, r.c0)] -= 1;
    }

    fn remove_prefilling(&mut self, id: u32) {
        if let Some(pos) = self.prefilling.iter().position(|&x| x == id) {
            self.prefilling.remove(pos);
        }
    }

    /// Tokens of this step's budget not yet given out.
    fn budget_left(&self, prefill_tokens: u32) -> u32 {
        self.max_tokens
            .saturating_sub(self.n_decode)
            .saturating_sub(prefill_tokens)
    }

    /// Whether a running-list entry still stands for a request running here: the request
    /// may have finished, been preempted (new epoch), or — prefilled here — moved on to a
    /// decode instance, where it runs under the same epoch.
    fn holds(&self, r: &Req, epoch: u32) -> bool {
        r.epoch == epoch
            && r.inst == self.id
            && matches!(r.state, State::Prefilling | State::Decoding)
    }

    /// Preempt the most recently admitted running request (vLLM's `self.running.pop()`):
    /// free its KV blocks and put it at the head of the waiting queue, to be recomputed from
    /// its prompt and the tokens it has produced. `allocated`: this step's decode blocks are
    /// already handed out (a decoding victim then frees the one it got). Returns the victim.
    fn preempt_last(
        &mut self,
        reqs: &mut [Req],
        free: &mut u64,
        allocated: bool,
        queue: &mut u64,
    ) -> Option<u32> {
        while let Some((id, epoch)) = self.running.pop() {
            if !self.holds(&reqs[id as usize], epoch) {
                continue;
            }
            let r = &mut reqs[id as usize];
            let freed = if r.state == State::Decoding {
                let advanced = (self.step - r.k0) as u32;
                let c = r.c0 + advanced;
                self.remove_decoding(r, c);
                r.generated += advanced;
                blocks(c) + u64::from(allocated && c % BLOCK_SIZE == 0)
            } else {
                self.remove_prefilling(id);
                blocks(r.done)
            };
            *free += freed;
            self.running_count -= 1;
            self.preemptions += 1;
            r.epoch += 1;
            r.state = State::Queued;
            r.target = r.isl + r.generated;
            r.done = 0;
            self.waiting.push_front(id);
            *queue += 1;
            return Some(id);
        }
        None
    }
}

struct Sim<'a> {
    pools: Vec<Pool>,
    reqs: Vec<Req>,
    insts: Vec<Instance>,
    /// Scheduler index ranges of the entry side and the decode side.
    sides: [std::ops::Range<usize>; 2],
    /// Per side, the schedulers of each instance (one per DP rank and pipeline lane) behind
    /// the instance's one API server: what the router picks from.
    groups: [Vec<std::ops::Range<usize>>; 2],
    /// Free KV blocks of each DP rank, and the schedulers (pipeline lanes) sharing them.
    free: Vec<u64>,
    kv_units: Vec<std::ops::Range<usize>>,
    router: Router,
    rr: [usize; 2],
    heap: BinaryHeap<Event>,
    seq: u64,
    now: f64,
    load: Load,
    arrivals: &'a [f64],
    next_request: usize,
    completed: usize,
    // Time integrals for queue lengths and Little's L.
    last_t: f64,
    in_system: u64,
    area_in_system: f64,
    queue: [u64; 2],
    queue_max: [u64; 2],
    area_queue: [f64; 2],
    steps_total: u64,
    max_steps: u64,
}

impl<'a> Sim<'a> {
    fn push(&mut self, time: f64, class: u8, kind: Kind) {
        self.seq += 1;
        self.heap.push(Event {
            time,
            class,
            seq: self.seq,
            kind,
        });
    }

    fn advance(&mut self, t: f64) {
        let dt = t - self.last_t;
        if dt > 0.0 {
            self.area_in_system += self.in_system as f64 * dt;
            for s in 0..2 {
                self.area_queue[s] += self.queue[s] as f64 * dt;
            }
            self.last_t = t;
        }
        self.now = t;
    }

    fn bump_queue(&mut self, side: usize) {
        self.queue[side] += 1;
        self.queue_max[side] = self.queue_max[side].max(self.queue[side]);
    }

    /// The scheduler a new request of `side` goes to: the router picks an instance, and
    /// the instance's API server the rank (and pipeline lane) with the fewest unfinished
    /// requests (vLLM's DP load balancer counts each engine's waiting and running requests;
    /// ties: the lowest index).
    fn route(&mut self, side: usize) -> usize {
        let groups = &self.groups[side];
        let load = |r: &std::ops::Range<usize>| -> u64 {
            self.insts[r.clone()]
                .iter()
                .map(|u| u64::from(u.outstanding))
                .sum()
        };
        let g = match self.router {
            Router::RoundRobin => {
                let j = self.rr[side];
                self.rr[side] = (j + 1) % groups.len();
                j
            }
            Router::LeastLoaded => (0..groups.len())
                .min_by_key(|&g| load(&groups[g]))
                .unwrap_or(0),
        };
        let units = groups[g].clone();
        units
            .clone()
            .min_by_key(|&u| self.insts[u].outstanding)
            .unwrap_or(units.start)
    }

    /// Blocks of DP rank `kv` came free: its other pipeline lanes may now admit work.
    fn wake_rank(&mut self, kv: usize, except: usize) {
        let units = self.kv_units[kv].clone();
        if units.len() > 1 {
            for u in units {
                if u != except {
                    self.wake(u);
                }
            }
        }
    }

    fn wake(&mut self, i: usize) {
        let inst = &mut self.insts[i];
        if !inst.busy && !inst.wake_pending {
            inst.wake_pending = true;
            let now = self.now;
            self.push(now, 1, Kind::Wake(i as u32));
        }
    }

    fn on_arrival(&mut self, id: u32) {
        let now = self.now;
        let r = &mut self.reqs[id as usize];
        r.arrival = now;
        r.target = r.isl;
        self.in_system += 1;
        let i = self.route(0);
        self.reqs[id as usize].inst = i as u32;
        self.insts[i].outstanding += 1;
        // The prompt reaches the scheduler after the performance model's admission delay
        // (request overhead + its scheduling wait in steps of the instance's current decode
        // step).
        let delay = {
            let inst = &self.insts[i];
            let n = f64::from(inst.n_decode);
            let decode = StepBatch {
                decode_seqs: n,
                decode_context_tokens: inst.ctx_sum as f64 + n,
                ..StepBatch::default()
            };
            let pool = &self.pools[inst.side];
            let step = pool.step_time(&decode);
            // The performance model charges `schedule_wait_steps` steps in all. A prompt
            // that reaches a busy instance also waits here for the step in progress to end
            // (half a step on average): that half is part of the count, not added to it.
            let in_progress = if inst.busy { 0.5 * step } else { 0.0 };
            // A closed loop's first wave (every client's first request, sent at once) also
            // waits out the engine's one-off warm-up, as the performance model charges it.
            let warm_up = match self.load {
                Load::Closed { concurrency } if id < concurrency => pool.constants.first_wave_stall,
                _ => 0.0,
            };
            (perf::admission_delay(&pool.constants, step) - in_progress).max(0.0) + warm_up
        };
        if delay > 0.0 && delay.is_finite() {
            self.push(now + delay, 0, Kind::Admit(id));
        } else {
            self.on_admit(id);
        }
        if self.load == Load::Open {
            let next = id as usize + 1;
            if next < self.arrivals.len() {
                let t = self.arrivals[next];
                self.push(t, 0, Kind::Arrival(next as u32));
            }
        }
    }

    /// The request's prompt joins its instance's waiting queue.
    fn on_admit(&mut self, id: u32) {
        let i = self.reqs[id as usize].inst as usize;
        self.reqs[id as usize].state = State::Queued;
        self.insts[i].waiting.push_back(id);
        self.bump_queue(0);
        self.wake(i);
    }

    fn on_transfer_done(&mut self, id: u32) {
        let r = &mut self.reqs[id as usize];
        r.state = State::Ready;
        let (holder, d, isl) = (r.holder as usize, r.inst as usize, r.isl);
        let kv = self.insts[holder].kv;
        self.free[kv] += blocks(isl);
        self.wake(holder);
        self.wake_rank(kv, holder);
        self.insts[d].ready.push_back(id);
        self.wake(d);
    }

    fn complete(&mut self, id: u32) {
        let now = self.now;
        let r = &mut self.reqs[id as usize];
        r.state = State::Finished;
        r.finish = now;
        let i = r.inst as usize;
        self.insts[i].outstanding -= 1;
        self.in_system -= 1;
        self.completed += 1;
        if let Load::Closed { .. } = self.load {
            if self.next_request < self.reqs.len() {
                let next = self.next_request as u32;
                self.next_request += 1;
                self.push(now, 0, Kind::Arrival(next));
            }
        }
    }

    /// Schedule and start one step on instance `i` (or leave it idle if there is no work).
    fn start_step(&mut self, i: usize) -> Result<(), SimError> {
        let now = self.now;
        let Sim {
            reqs,
            insts,
            pools,
            queue,
            heap,
            seq,
            free,
            ..
        } = self;
        let inst = &mut insts[i];
        let free = &mut free[inst.kv];
        let side = inst.side;
        let k = inst.step;
        inst.chunks.clear();
        inst.joined.clear();
        let mut preempted = false;

        // 1. Running decodes: one token each, and a block for those whose phase is due.
        let due = (k % PHASES as u64) as usize;
        while *free < u64::from(inst.per_phase[due]) {
            if inst
                .preempt_last(reqs, free, false, &mut queue[side])
                .is_none()
            {
                break;
            }
            preempted = true;
        }
        *free -= u64::from(inst.per_phase[due]);

        // 2. Running prompts: the next chunk of each, in admission order.
        let mut prefill_tokens = 0u32;
        let mut idx = 0;
        'prompts: while idx < inst.prefilling.len() {
            let left = inst.budget_left(prefill_tokens);
            if left == 0 {
                break;
            }
            let id = inst.prefilling[idx];
            let r = &reqs[id as usize];
            let chunk = (r.target - r.done).min(left);
            let need = blocks(r.done + chunk) - blocks(r.done);
            while *free < need {
                match inst.preempt_last(reqs, free, true, &mut queue[side]) {
                    Some(victim) => {
                        preempted = true;
                        if victim == id {
                            continue 'prompts;
                        }
                    }
                    None => break 'prompts,
                }
            }
            *free -= need;
            inst.chunks.push((id, chunk));
            prefill_tokens += chunk;
            idx += 1;
        }

        // 3. Waiting requests, FCFS, only if nobody was preempted (as vLLM).
        if !preempted {
            while let Some(&id) = inst.ready.front() {
                if inst.running_count >= inst.max_seqs || inst.budget_left(prefill_tokens) == 0 {
                    break;
                }
                let r = &mut reqs[id as usize];
                // The decode instance recomputes the last prompt token to sample the first
                // output token (vLLM's full-prompt hit rule), so it holds isl − 1 tokens.
                let c0 = r.isl - 1;
                let need = u64::from(c0 % BLOCK_SIZE == 0);
                if *free < need {
                    break;
                }
                *free -= need;
                inst.ready.pop_front();
                inst.add_decoding(r, id, c0, k);
                inst.running.push((id, r.epoch));
                inst.running_count += 1;
                inst.joined.push(id);
                queue[side] -= 1;
            }
            while let Some(&id) = inst.waiting.front() {
                let left = inst.budget_left(prefill_tokens);
                if inst.running_count >= inst.max_seqs || left == 0 {
                    break;
                }
                let r = &mut reqs[id as usize];
                if r.state == State::RemoteQueued {
                    // Allocate the prompt's blocks, then read the KV from the prefill instance.
                    let need = blocks(r.isl - 1);
                    if *free < need {
                        break;
                    }
                    *free -= need;
                    inst.waiting.pop_front();
                    r.state = State::Transferring;
                    let p = &pools[0];
                    let t = perf::kv_transfer_time(
                        &p.model,
                        &p.constants,
                        p.layout.tp,
                        f64::from(r.isl),
                    );
                    *seq += 1;
                    heap.push(Event {
                        time: now + t.max(0.0),
                        class: 0,
                        seq: *seq,
                        kind: Kind::TransferDone(id),
                    });
                    continue;
                }
                let chunk = r.target.min(left);
                let need = blocks(chunk);
                if *free < need {
                    break;
                }
                *free -= need;
                inst.waiting.pop_front();
                r.state = State::Prefilling;
                r.done = 0;
                inst.running.push((id, r.epoch));
                inst.running_count += 1;
                inst.prefilling.push_back(id);
                inst.chunks.push((id, chunk));
                prefill_tokens += chunk;
                queue[side] -= 1;
            }
        }

        if inst.n_decode == 0 && inst.chunks.is_empty() {
            inst.busy = false;
            return Ok(());
        }
        // Drop stale running entries now and then (finished or preempted requests).
        if inst.running.len() > 2 * inst.running_count as usize + 64 {
            let mut running = std::mem::take(&mut inst.running);
            running.retain(|&(id, epoch)| inst.holds(&reqs[id as usize], epoch));
            inst.running = running;
        }
        let mut work = 0.0;
        for &(id, chunk) in &inst.chunks {
            let (done, chunk) = (f64::from(reqs[id as usize].done), f64::from(chunk));
            work += chunk * (done + chunk / 2.0);
        }
        let n = f64::from(inst.n_decode);
        let batch = StepBatch {
            decode_seqs: n,
            decode_context_tokens: inst.ctx_sum as f64 + n,
            prefill_tokens: f64::from(prefill_tokens),
            prefill_attention_work: work,
        };
        let dt = pools[side].step_time(&batch);
        if !(dt.is_finite() && dt > 0.0) {
            return Err(SimError::new(format!(
                "the performance model gave a step time of {dt} s for {batch:?}"
            )));
        }
        inst.busy = true;
        inst.busy_time += dt;
        inst.steps += 1;
        inst.step_tokens += u64::from(inst.n_decode) + u64::from(prefill_tokens);
        inst.decode_seq_steps += u64::from(inst.n_decode);
        self.steps_total += 1;
        if self.steps_total > self.max_steps {
            return Err(SimError::new(
                "the simulation ran too many steps for its requests (KV cache thrashing: \
                 requests are preempted again and again); give the instances more KV memory",
            ));
        }
        self.push(now + dt, 0, Kind::StepEnd(i as u32));
        Ok(())
    }

    fn on_step_end(&mut self, i: usize) -> Result<(), SimError> {
        let now = self.now;
        let k = {
            let inst = &mut self.insts[i];
            let k = inst.step;
            inst.step += 1;
            inst.ctx_sum += u64::from(inst.n_decode);
            k
        };
        // First tokens of sequences that joined a decode instance this step.
        let joined = std::mem::take(&mut self.insts[i].joined);
        for &id in &joined {
            self.reqs[id as usize].first_token = now;
        }
        self.insts[i].joined = joined;
        // Sequences whose last token this step produced.
        let mut freed = false;
        loop {
            let inst = &mut self.insts[i];
            let Some(&Reverse((step, id, epoch))) = inst.finishes.peek() else {
                break;
            };
            if step > k {
                break;
            }
            inst.finishes.pop();
            let r = &mut self.reqs[id as usize];
            if r.epoch != epoch || r.state != State::Decoding {
                continue;
            }
            let c = r.c0 + (k + 1 - r.k0) as u32;
            inst.remove_decoding(r, c);
            self.free[inst.kv] += blocks(c);
            freed = true;
            inst.running_count -= 1;
            r.generated = r.osl;
            self.complete(id);
        }
        // Prompt chunks: a finished prompt samples a token (aggregated) or goes to decode.
        let chunks = std::mem::take(&mut self.insts[i].chunks);
        for &(id, chunk) in &chunks {
            let r = &mut self.reqs[id as usize];
            if r.state != State::Prefilling {
                continue;
            }
            r.done += chunk;
            if r.done < r.target {
                continue;
            }
            self.insts[i].remove_prefilling(id);
            if self.insts[i].role == Role::Prefill {
                // The prefill instance's own sampled token is discarded by the proxy; the
                // decode instance produces the first token. The KV stays here until read.
                r.holder = i as u32;
                r.state = State::RemoteQueued;
                self.insts[i].running_count -= 1;
                self.insts[i].outstanding -= 1;
                let d = self.route(1);
                self.reqs[id as usize].inst = d as u32;
                self.insts[d].waiting.push_back(id);
                self.insts[d].outstanding += 1;
                self.bump_queue(1);
                self.wake(d);
                continue;
            }
            r.generated += 1;
            if r.generated == 1 {
                r.first_token = now;
            }
            if r.generated >= r.osl {
                let target = r.target;
                let kv = self.insts[i].kv;
                self.free[kv] += blocks(target);
                freed = true;
                self.insts[i].running_count -= 1;
                self.complete(id);
            } else {
                let target = r.target;
                self.insts[i].add_decoding(r, id, target, k + 1);
            }
        }
        self.insts[i].chunks = chunks;
        if freed {
            let kv = self.insts[i].kv;
            self.wake_rank(kv, i);
        }
        self.start_step(i)
    }
}

/// Simulate `requests` on the deployment of `cfg`.
pub(super) fn run(cfg: &Config, load: &Load, requests: &Requests) -> Result<SimResult, SimError> {
    let (pools, roles): (Vec<Pool>, Vec<Role>) = match cfg.deployment {
        Deployment::Aggregated(p) => (vec![p], vec![Role::Aggregated]),
        Deployment::Disaggregated { prefill, decode } => {
            (vec![prefill, decode], vec![Role::Prefill, Role::Decode])
        }
    };
    check_fits(&pools, &roles, requests)?;
    // One scheduler per DP rank (its own engine core and KV cache) and pipeline lane (a
    // micro-batch in flight; the lanes of a rank share its KV cache), grouped per instance.
    let mut insts = Vec::new();
    let mut sides = [0..0, 0..0];
    let mut groups: [Vec<std::ops::Range<usize>>; 2] = [Vec::new(), Vec::new()];
    let mut free = Vec::new();
    let mut kv_units = Vec::new();
    for (s, (pool, role)) in pools.iter().zip(&roles).enumerate() {
        let start = insts.len();
        let blocks = pool.kv_blocks();
        for _ in 0..pool.instances {
            let first = insts.len();
            for _ in 0..pool.ranks() {
                let kv = free.len();
                free.push(blocks);
                let lanes = insts.len();
                for _ in 0..pool.lanes() {
                    let id = insts.len() as u32;
                    insts.push(Instance::new(id, *role, s, kv, pool));
                }
                kv_units.push(lanes..insts.len());
            }
            groups[s].push(first..insts.len());
        }
        sides[s] = start..insts.len();
    }
    if sides[1].is_empty() {
        sides[1] = sides[0].clone();
        groups[1] = groups[0].clone();
    }
    let n = requests.len();
    let reqs: Vec<Req> = (0..n)
        .map(|j| Req {
            arrival: 0.0,
            first_token: f64::NAN,
            finish: f64::NAN,
            isl: requests.isl[j],
            osl: requests.osl[j],
            generated: 0,
            target: requests.isl[j],
            done: 0,
            c0: 0,
            k0: 0,
            epoch: 0,
            inst: 0,
            holder: 0,
            state: State::Pending,
        })
        .collect();
    let tokens: u64 = requests
        .isl
        .iter()
        .zip(&requests.osl)
        .map(|(&a, &b)| u64::from(a) + u64::from(b))
        .sum();
    let start_time = match load {
        Load::Open => requests.arrival[0],
        Load::Closed { .. } => 0.0,
    };
    let mut sim = Sim {
        pools,
        reqs,
        insts,
        sides,
        groups,
        free,
        kv_units,
        router: cfg.router,
        rr: [0, 0],
        heap: BinaryHeap::new(),
        seq: 0,
        now: start_time,
        load: *load,
        arrivals: &requests.arrival,
        next_request: 0,
        completed: 0,
        last_t: start_time,
        in_system: 0,
        area_in_system: 0.0,
        queue: [0, 0],
        queue_max: [0, 0],
        area_queue: [0.0, 0.0],
        steps_total: 0,
        // A step computes at least one token unless preemptions undo work: this bound is
        // only reached by thrashing.
        max_steps: tokens.saturating_mul(8).saturating_add(1_000_000),
    };
    match *load {
        Load::Open => sim.push(requests.arrival[0], 0, Kind::Arrival(0)),
        Load::Closed { concurrency } => {
            let first = (concurrency as usize).min(n);
            for j in 0..first {
                sim.push(start_time, 0, Kind::Arrival(j as u32));
            }
            sim.next_request = first;
        }
    }
    while let Some(ev) = sim.heap.pop() {
        sim.advance(ev.time);
        match ev.kind {
            Kind::Arrival(id) => sim.on_arrival(id),
            Kind::Admit(id) => sim.on_admit(id),
            Kind::StepEnd(i) => sim.on_step_end(i as usize)?,
            Kind::TransferDone(id) => sim.on_transfer_done(id),
            Kind::Wake(i) => {
                let i = i as usize;
                sim.insts[i].wake_pending = false;
                if !sim.insts[i].busy {
                    sim.start_step(i)?;
                }
            }
        }
    }
    if sim.completed != n {
        return Err(SimError::internal(format!(
            "internal error: the simulation stalled with {} of {n} requests unfinished \
             (please report)",
            n - sim.completed
        )));
    }
    Ok(summarize(&sim, cfg, start_time))
}

/// Every request must fit in one instance's KV cache (vLLM refuses to start otherwise).
fn check_fits(pools: &[Pool], roles: &[Role], requests: &Requests) -> Result<(), SimError> {
    for (pool, role) in pools.iter().zip(roles) {
        let total = pool.kv_blocks();
        let (name, j, need) = match role {
            Role::Prefill => {
                let (j, &isl) = requests
                    .isl
                    .iter()
                    .enumerate()
                    .max_by_key(|&(_, &x)| x)
                    .expect("at least one request");
                ("prefill", j, blocks(isl))
            }
            _ => {
                let (j, tokens) = requests
                    .isl
                    .iter()
                    .zip(&requests.osl)
                    .map(|(&a, &b)| u64::from(a) + u64::from(b))
                    .enumerate()
                    .max_by_key(|&(_, t)| t)
                    .expect("at least one request");
                let name = if *role == Role::Decode {
                    "decode"
                } else {
                    "aggregated"
                };
                (name, j, tokens.div_ceil(u64::from(BLOCK_SIZE)))
            }
        };
        if need > total {
            return Err(SimError::new(format!(
                "request {j} ({} input + {} output tokens) needs {need} KV-cache blocks of \
                 {BLOCK_SIZE} tokens, but one {name} {} holds {total}; vLLM would \
                 refuse a max_model_len this long (raise tp, gpu_memory_utilization or use an \
                 fp8 KV cache)",
                requests.isl[j],
                requests.osl[j],
                pool.describe()
            )));
        }
    }
    Ok(())
}

fn summarize(sim: &Sim, cfg: &Config, start: f64) -> SimResult {
    let n = sim.reqs.len();
    let end = sim.reqs.iter().map(|r| r.finish).fold(start, f64::max);
    let duration = (end - start).max(f64::MIN_POSITIVE);
    let mut ttft = Vec::with_capacity(n);
    let mut tpot = Vec::with_capacity(n);
    let mut e2e = Vec::with_capacity(n);
    let mut tpot_each = Vec::with_capacity(n);
    let mut good = 0usize;
    let mut out_tokens = 0u64;
    for r in &sim.reqs {
        let t = r.first_token - r.arrival;
        let per_token = (r.osl > 1).then(|| (r.finish - r.first_token) / f64::from(r.osl - 1));
        ttft.push(t);
        if let Some(p) = per_token {
            tpot.push(p);
        }
        tpot_each.push(per_token.unwrap_or(f64::NAN));
        e2e.push(r.finish - r.arrival);
        good += usize::from(cfg.slo.met(t, per_token));
        out_tokens += u64::from(r.osl);
    }
    let ttft_each = ttft.clone();
    for v in [&mut ttft, &mut tpot, &mut e2e] {
        v.sort_unstable_by(f64::total_cmp);
    }
    let sides = sim
        .pools
        .iter()
        .enumerate()
        .map(|(s, pool)| {
            let insts = &sim.insts[sim.sides[s].clone()];
            let busy: f64 = insts.iter().map(|x| x.busy_time).sum();
            let steps: u64 = insts.iter().map(|x| x.steps).sum();
            let per_step = |v: u64| {
                if steps > 0 {
                    v as f64 / steps as f64
                } else {
                    0.0
                }
            };
            SideStats {
                role: match insts[0].role {
                    Role::Aggregated => "aggregated",
                    Role::Prefill => "prefill",
                    Role::Decode => "decode",
                },
                instances: pool.instances,
                kv_blocks: pool.kv_blocks(),
                utilization: busy / (insts.len() as f64 * duration),
                steps,
                mean_step_tokens: per_step(insts.iter().map(|x| x.step_tokens).sum()),
                mean_decode_batch: per_step(insts.iter().map(|x| x.decode_seq_steps).sum()),
                queue_mean: sim.area_queue[s] / duration,
                queue_max: sim.queue_max[s],
                preemptions: insts.iter().map(|x| x.preemptions).sum(),
            }
        })
        .collect();
    SimResult {
        requests: n,
        duration,
        throughput_rps: n as f64 / duration,
        output_tokens_per_s: out_tokens as f64 / duration,
        goodput_rps: good as f64 / duration,
        slo_attainment: good as f64 / n as f64,
        ttft: Percentiles::of_sorted(&ttft),
        tpot: Percentiles::of_sorted(&tpot),
        e2e: Percentiles::of_sorted(&e2e),
        mean_in_system: sim.area_in_system / duration,
        sides,
        slo: cfg.slo,
        ttft_sorted: ttft,
        tpot_sorted: tpot,
        ttft_each,
        tpot_each,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;
    use crate::perf::tests::{consts, h100, llama70};

    fn req(state: State, inst: u32) -> Req {
        Req {
            arrival: 0.0,
            first_token: 0.0,
            finish: f64::NAN,
            isl: 100,
            osl: 10,
            generated: 1,
            target: 100,
            done: 100,
            c0: 100,
            k0: 0,
            epoch: 0,
            inst,
            holder: 0,
            state,
        }
    }

    #[test]
    fn a_stale_entry_of_a_request_decoding_elsewhere_is_not_preempted() {
        let pool = Pool {
            model: llama70(),
            gpu: h100(),
            constants: consts(),
            layout: Layout::tp(8),
            instances: 1,
            gpu_memory_utilization: 0.9,
            max_num_seqs: 8,
            max_num_batched_tokens: 8192,
        };
        // Prefill instance 0 still lists request 0, which it prefilled and which now decodes
        // on decode instance 1 under the same epoch.
        let mut prefill = Instance::new(0, Role::Prefill, 0, 0, &pool);
        let mut reqs = vec![req(State::Decoding, 1)];
        prefill.running.push((0, 0));
        let (mut free, mut queue) = (pool.kv_blocks(), 0);
        assert_eq!(
            prefill.preempt_last(&mut reqs, &mut free, false, &mut queue),
            None
        );
        assert_eq!(
            (free, queue, reqs[0].state),
            (pool.kv_blocks(), 0, State::Decoding)
        );
    }
}
