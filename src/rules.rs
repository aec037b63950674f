//! vLLM's heterogeneous-TP rules, restated exactly (rules.md §1–4).
//!
//! Every function keeps vLLM's check order and message text, because users grep logs for
//! those messages and because the order decides *which* error a bad pair produces.

use std::fmt;

/// The exception classes vLLM raises from these rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleError {
    /// vLLM raises `ValueError`.
    Value(String),
    /// vLLM raises `NotImplementedError`.
    NotImplemented(String),
    /// vLLM fails an `assert` (`AssertionError`; the message may be empty).
    Assertion(String),
}

impl RuleError {
    pub fn message(&self) -> &str {
        match self {
            RuleError::Value(m) | RuleError::NotImplemented(m) | RuleError::Assertion(m) => m,
        }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for RuleError {}

/// `get_moriio_remote_tp_rank`: the one remote rank a local rank reads from (rules.md §1).
pub fn remote_tp_rank(
    local_tp_rank: i64,
    local_tp_size: i64,
    remote_tp_size: i64,
) -> Result<i64, RuleError> {
    if local_tp_size <= 0 || remote_tp_size <= 0 {
        return Err(RuleError::Value("TP sizes must be positive".into()));
    }
    if local_tp_rank < 0 || local_tp_rank >= local_tp_size {
        return Err(RuleError::Value(format!(
            "local_tp_rank {local_tp_rank} must be in [0, {local_tp_size})"
        )));
    }
    if remote_tp_size == local_tp_size {
        return Ok(local_tp_rank);
    }
    if remote_tp_size > local_tp_size {
        if remote_tp_size % local_tp_size != 0 {
            return Err(RuleError::Value(format!(
                "remote tp_size {remote_tp_size} must be a multiple of local tp_size \
                 {local_tp_size} for heterogeneous-TP P/D"
            )));
        }
        // rank < local and ratio = remote / local, so the product is < remote: no overflow.
        return Ok(local_tp_rank * (remote_tp_size / local_tp_size));
    }
    if local_tp_size % remote_tp_size != 0 {
        return Err(RuleError::Value(format!(
            "local tp_size {local_tp_size} must be a multiple of remote tp_size \
             {remote_tp_size} for heterogeneous-TP P/D"
        )));
    }
    Ok(local_tp_rank / (local_tp_size / remote_tp_size))
}

/// `validate_moriio_heterogeneous_tp_kv_heads` (rules.md §2). The MLA/equal-size early
/// return deliberately precedes the positivity check, as in vLLM: `(0, 0, 0, false)` passes.
pub fn validate_kv_heads(
    local_tp_size: i64,
    remote_tp_size: i64,
    total_num_kv_heads: i64,
    is_mla: bool,
) -> Result<(), RuleError> {
    if is_mla || local_tp_size == remote_tp_size {
        return Ok(());
    }
    if local_tp_size <= 0 || remote_tp_size <= 0 || total_num_kv_heads <= 0 {
        return Err(RuleError::Value(
            "TP sizes and total_num_kv_heads must be positive".into(),
        ));
    }
    if local_tp_size.min(remote_tp_size) >= total_num_kv_heads {
        return Ok(());
    }
    Err(RuleError::NotImplemented(format!(
        "MoRIIO heterogeneous TP requires replicated KV heads on both prefill and decode. \
         Got total_num_kv_heads={total_num_kv_heads}, local_tp_size={local_tp_size}, \
         remote_tp_size={remote_tp_size}."
    )))
}

/// `get_moriio_expected_ack_count` (rules.md §3): release acks a prefill rank waits for.
/// No divisibility check when the consumer is not larger, exactly as vLLM: `(6, 4)` → 1.
pub fn expected_ack_count(producer_tp_size: i64, consumer_tp_size: i64) -> Result<i64, RuleError> {
    if producer_tp_size <= 0 || consumer_tp_size <= 0 {
        return Err(RuleError::Value("TP sizes must be positive".into()));
    }
    if consumer_tp_size <= producer_tp_size {
        return Ok(1);
    }
    if consumer_tp_size % producer_tp_size != 0 {
        return Err(RuleError::Value(format!(
            "consumer tp_size {consumer_tp_size} must be a multiple of producer tp_size \
             {producer_tp_size} for heterogeneous-TP P/D"
        )));
    }
    Ok(consumer_tp_size / producer_tp_size)
}

/// `get_moriio_read_holder_tp_ranks` (0.33.0): the remote ranks holding a local READ rank's
/// share, each freed only once this rank releases it.
pub fn read_holder_tp_ranks(
    local_tp_rank: i64,
    local_tp_size: i64,
    remote_tp_size: i64,
) -> Result<Vec<i64>, RuleError> {
    let first = remote_tp_rank(local_tp_rank, local_tp_size, remote_tp_size)?;
    if remote_tp_size <= local_tp_size {
        return Ok(vec![first]);
    }
    Ok((first..first + remote_tp_size / local_tp_size).collect())
}

/// `validate_write_tp_topology` (MoRIIO WRITE mode, 0.33.0): the TP pairs the write mapping
/// can express. Sizes first, then (unless MLA or equal sizes) that both sides shard the heads.
pub fn validate_write_tp_topology(
    producer_tp_size: i64,
    consumer_tp_size: i64,
    total_num_kv_heads: i64,
    is_mla: bool,
) -> Result<(), RuleError> {
    if producer_tp_size <= 0 || consumer_tp_size <= 0 {
        return Err(RuleError::Value("TP sizes must be positive".into()));
    }
    let larger = producer_tp_size.max(consumer_tp_size);
    let smaller = producer_tp_size.min(consumer_tp_size);
    if larger % smaller != 0 {
        return Err(RuleError::Value(format!(
            "MoRIIO WRITE needs one TP size to be a multiple of the other, got producer \
             tp_size={producer_tp_size}, consumer tp_size={consumer_tp_size}"
        )));
    }
    if is_mla || producer_tp_size == consumer_tp_size {
        return Ok(());
    }
    if total_num_kv_heads <= 0 {
        return Err(RuleError::Value(
            "total_num_kv_heads must be positive".into(),
        ));
    }
    let h = total_num_kv_heads;
    for tp in [producer_tp_size, consumer_tp_size] {
        if (tp <= h && h % tp != 0) || (tp > h && tp % h != 0) {
            return Err(RuleError::Value(format!(
                "MoRIIO WRITE cannot shard {h} KV heads over tp_size={tp}"
            )));
        }
    }
    Ok(())
}

/// `_rank_heads` (MoRIIO's statement of vLLM's sharding): the first head and head count of
/// a rank; with more ranks than heads every rank holds the single head `rank * H // tp`.
pub fn rank_heads(tp_rank: i64, tp_size: i64, total_num_kv_heads: i64) -> (i64, i64) {
    let h = total_num_kv_heads;
    if tp_size <= h {
        let per = h / tp_size;
        return (tp_rank * per, per);
    }
    // tp_rank < tp_size <= 2^16 and h < tp_size here: no overflow.
    (tp_rank * h / tp_size, 1)
}

/// One target of `compute_write_tp_mapping` (no mamba state): the consumer rank, where the
/// heads land in its block, how many, and how many producers write into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteTarget {
    pub tp_rank: i64,
    pub remote_head: i64,
    pub num_heads: i64,
    pub num_writers: i64,
}

/// `compute_write_tp_mapping(...).targets` for a model without mamba state: the consumer
/// ranks one producer rank writes. Fan-out: consumers `p*r .. p*r+r-1`, each its slice;
/// fan-in: consumer `p / r`, written only by the first producer holding each head.
pub fn write_targets(
    producer_tp_rank: i64,
    producer_tp_size: i64,
    consumer_tp_size: i64,
    total_num_kv_heads: i64,
    is_mla: bool,
) -> Result<Vec<WriteTarget>, RuleError> {
    validate_write_tp_topology(
        producer_tp_size,
        consumer_tp_size,
        total_num_kv_heads,
        is_mla,
    )?;
    if producer_tp_rank < 0 || producer_tp_rank >= producer_tp_size {
        return Err(RuleError::Value(format!(
            "producer_tp_rank {producer_tp_rank} must be in [0, {producer_tp_size})"
        )));
    }
    let h = if is_mla { 1 } else { total_num_kv_heads };
    let (p, pt, ct) = (producer_tp_rank, producer_tp_size, consumer_tp_size);
    let local = rank_heads(p, pt, h);
    if ct >= pt {
        let ratio = ct / pt;
        return Ok((0..ratio)
            .map(|j| {
                let remote = rank_heads(p * ratio + j, ct, h);
                WriteTarget {
                    tp_rank: p * ratio + j,
                    remote_head: 0,
                    num_heads: remote.1,
                    num_writers: 1,
                }
            })
            .collect());
    }
    let ratio = pt / ct;
    let tp_rank = p / ratio;
    let remote = rank_heads(tp_rank, ct, h);
    let group = tp_rank * ratio..(tp_rank + 1) * ratio;
    let first_holder = group
        .clone()
        .find(|&q| rank_heads(q, pt, h).0 == local.0)
        .unwrap_or(p);
    if first_holder != p {
        return Ok(Vec::new());
    }
    let writers = group
        .clone()
        .filter(|&q| (group.start..q).all(|o| rank_heads(o, pt, h).0 != rank_heads(q, pt, h).0))
        .count() as i64;
    Ok(vec![WriteTarget {
        tp_rank,
        remote_head: local.0 - remote.0,
        num_heads: local.1,
        num_writers: writers,
    }])
}

/// Model-load rule: attention heads split evenly (vLLM's `ValueError` at engine start).
pub fn check_attention_heads(num_attention_heads: i64, tp: i64) -> Result<(), RuleError> {
    if tp <= 0 || num_attention_heads % tp != 0 {
        return Err(RuleError::Value(format!(
            "Total number of attention heads ({num_attention_heads}) must be divisible by \
             tensor parallel size ({tp})."
        )));
    }
    Ok(())
}

/// Model-load rule for KV heads: vLLM's QKV layer calls `divide(tp, H)` when tp ≥ H (each
/// rank holds one replicated head) and `divide(H, tp)` otherwise; `divide` asserts with
/// `"{a} is not divisible by {b}"`. MLA models have no per-head KV split, so no rule.
pub fn check_kv_heads(num_kv_heads: i64, tp: i64, is_mla: bool) -> Result<(), String> {
    if is_mla {
        return Ok(());
    }
    let (a, b) = if tp >= num_kv_heads {
        (tp, num_kv_heads)
    } else {
        (num_kv_heads, tp)
    };
    if b <= 0 || a % b != 0 {
        return Err(format!("{a} is not divisible by {b}"));
    }
    Ok(())
}

/// KV heads one rank holds: 1 for MLA (the whole latent), else `max(1, H / tp)`.
pub fn kv_heads_per_rank(num_kv_heads: i64, tp: i64, is_mla: bool) -> i64 {
    if is_mla || tp <= 0 {
        1
    } else {
        (num_kv_heads / tp).max(1)
    }
}

/// The KV-head indices rank `rank` holds in vLLM's QKV layout (rules.md §4): a contiguous
/// block when tp ≤ H, else the single head `rank / (tp / H)`. MLA: index 0 is the latent.
pub fn kv_heads_of_rank(num_kv_heads: i64, tp: i64, rank: i64, is_mla: bool) -> Vec<i64> {
    if is_mla || num_kv_heads <= 0 || tp <= 0 {
        return vec![0];
    }
    if tp <= num_kv_heads {
        let per = num_kv_heads / tp;
        (rank * per..(rank + 1) * per).collect()
    } else {
        vec![rank / (tp / num_kv_heads).max(1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_cases_remote_tp_rank() {
        let r = |l, s, t| remote_tp_rank(l, s, t);
        assert_eq!(
            (0..4).map(|x| r(x, 4, 4).unwrap()).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(
            (0..8).map(|x| r(x, 8, 4).unwrap()).collect::<Vec<_>>(),
            [0, 0, 1, 1, 2, 2, 3, 3]
        );
        assert_eq!(
            (0..4).map(|x| r(x, 4, 8).unwrap()).collect::<Vec<_>>(),
            [0, 2, 4, 6]
        );
        assert_eq!(
            r(0, 6, 4).unwrap_err(),
            RuleError::Value(
                "local tp_size 6 must be a multiple of remote tp_size 4 for heterogeneous-TP P/D"
                    .into()
            )
        );
        assert_eq!(
            r(0, 4, 6).unwrap_err().message(),
            "remote tp_size 6 must be a multiple of local tp_size 4 for heterogeneous-TP P/D"
        );
        assert_eq!(
            r(4, 4, 8).unwrap_err().message(),
            "local_tp_rank 4 must be in [0, 4)"
        );
        assert_eq!(
            r(0, 0, 4).unwrap_err().message(),
            "TP sizes must be positive"
        );
        // Positivity is checked before the rank range.
        assert_eq!(
            r(-1, -1, 4).unwrap_err().message(),
            "TP sizes must be positive"
        );
    }

    #[test]
    fn peer_cases_validate_kv_heads() {
        for (l, r, h, m) in [
            (4, 4, 8, false),
            (8, 4, 4, false),
            (4, 8, 4, false),
            (2, 4, 4, true),
        ] {
            assert!(validate_kv_heads(l, r, h, m).is_ok());
        }
        assert!(validate_kv_heads(16, 8, 8, false).is_ok());
        assert!(validate_kv_heads(0, 0, 0, false).is_ok());
        for (l, r) in [(4, 2), (2, 4)] {
            match validate_kv_heads(l, r, 4, false) {
                Err(RuleError::NotImplemented(m)) => assert_eq!(
                    m,
                    format!(
                        "MoRIIO heterogeneous TP requires replicated KV heads on both prefill \
                         and decode. Got total_num_kv_heads=4, local_tp_size={l}, \
                         remote_tp_size={r}."
                    )
                ),
                other => panic!("expected NotImplemented, got {other:?}"),
            }
        }
        assert!(matches!(
            validate_kv_heads(4, 8, 8, false),
            Err(RuleError::NotImplemented(_))
        ));
        assert_eq!(
            validate_kv_heads(4, 2, 0, false).unwrap_err(),
            RuleError::Value("TP sizes and total_num_kv_heads must be positive".into())
        );
    }

    #[test]
    fn peer_cases_expected_ack_count() {
        assert_eq!(expected_ack_count(4, 4), Ok(1));
        assert_eq!(expected_ack_count(8, 4), Ok(1));
        assert_eq!(expected_ack_count(6, 4), Ok(1));
        assert_eq!(expected_ack_count(4, 8), Ok(2));
        assert_eq!(expected_ack_count(4, 16), Ok(4));
        assert_eq!(
            expected_ack_count(4, 6).unwrap_err().message(),
            "consumer tp_size 6 must be a multiple of producer tp_size 4 for heterogeneous-TP P/D"
        );
        assert_eq!(
            expected_ack_count(0, 4).unwrap_err().message(),
            "TP sizes must be positive"
        );
    }

    #[test]
    fn extreme_values_do_not_panic() {
        for v in [i64::MIN, -1, 0, 1, 2, 3, i64::MAX - 1, i64::MAX] {
            for w in [i64::MIN, -1, 0, 1, 2, 3, i64::MAX - 1, i64::MAX] {
                for x in [i64::MIN, -1, 0, 1, i64::MAX] {
                    let _ = remote_tp_rank(x, v, w);
                    let _ = validate_kv_heads(v, w, x, false);
                    let _ = check_attention_heads(v, w);
                    let _ = check_kv_heads(v, w, false);
                    let _ = kv_heads_per_rank(v, w, false);
                }
                let _ = expected_ack_count(v, w);
            }
        }
    }

    #[test]
    fn model_load_rules() {
        assert!(check_attention_heads(64, 8).is_ok());
        assert_eq!(
            check_attention_heads(40, 16).unwrap_err().message(),
            "Total number of attention heads (40) must be divisible by tensor parallel size (16)."
        );
        assert!(check_kv_heads(8, 16, false).is_ok());
        assert_eq!(
            check_kv_heads(10, 4, false).unwrap_err(),
            "10 is not divisible by 4"
        );
        assert_eq!(
            check_kv_heads(4, 6, false).unwrap_err(),
            "6 is not divisible by 4"
        );
        assert!(check_kv_heads(4, 6, true).is_ok());
        assert_eq!(kv_heads_of_rank(8, 4, 1, false), vec![2, 3]);
        assert_eq!(kv_heads_of_rank(4, 8, 5, false), vec![2]);
    }
}
