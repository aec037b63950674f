//! pdtp's core: vLLM's prefill/decode heterogeneous-TP rules, the transfer map, the
//! performance model's arithmetic and the candidate table the solver chooses from.
//!
//! Everything here is plain Rust. The PyO3 layer lives in `py` behind the `python`
//! feature, so `cargo test` builds and runs without a Python interpreter.

pub mod check;
pub mod connector;
pub mod layout;
pub mod layout_rules;
pub mod perf;
pub mod plan;
pub mod rules;
pub mod sim;
pub mod sweep;
pub mod transfer;

#[cfg(feature = "python")]
mod py;
