//! A user's request trace: CSV rows of arrival time (s), input tokens and output tokens.
//!
//! The first non-empty line may be a header naming the columns (any order, other columns
//! ignored); without one the first three columns are taken in that order. Blank lines and
//! lines starting with `#` are skipped. Every error names the file and line.

use super::{SimError, MAX_REQUESTS, MAX_TOKENS};

/// Largest trace file the simulator reads.
pub const MAX_TRACE_BYTES: usize = 64 << 20;

const ARRIVAL_NAMES: &[&str] = &[
    "arrival_s",
    "arrival",
    "arrival_time",
    "arrival_time_s",
    "timestamp",
    "time",
    "time_s",
];
const INPUT_NAMES: &[&str] = &[
    "input_tokens",
    "isl",
    "prompt_tokens",
    "input_len",
    "input_length",
];
const OUTPUT_NAMES: &[&str] = &[
    "output_tokens",
    "osl",
    "completion_tokens",
    "output_len",
    "output_length",
];

/// The parsed trace, in file order (arrival times non-decreasing).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trace {
    pub arrival: Vec<f64>,
    pub isl: Vec<u32>,
    pub osl: Vec<u32>,
}

fn find(header: &[String], names: &[&str], what: &str, name: &str) -> Result<usize, SimError> {
    header
        .iter()
        .position(|h| names.contains(&h.as_str()))
        .ok_or_else(|| {
            SimError::new(format!(
                "{name} line 1: the header has no {what} column (one of: {}); columns are: {}",
                names.join(", "),
                header.join(", ")
            ))
        })
}

fn tokens(cell: &str, column: &str, name: &str, line: usize) -> Result<u32, SimError> {
    let v: f64 = cell.parse().map_err(|_| {
        SimError::new(format!(
            "{name} line {line}: {column} must be a whole number of tokens, got {cell:?}"
        ))
    })?;
    if !(v.fract() == 0.0 && v >= 1.0 && v <= f64::from(MAX_TOKENS)) {
        return Err(SimError::new(format!(
            "{name} line {line}: {column} must be a whole number in 1..={MAX_TOKENS}, got {cell:?}"
        )));
    }
    Ok(v as u32)
}

/// Parse a trace's text; `name` (the file's name) appears in every error.
pub fn parse(text: &str, name: &str) -> Result<Trace, SimError> {
    if text.len() > MAX_TRACE_BYTES {
        return Err(SimError::new(format!(
            "{name}: the trace is {} bytes; at most {MAX_TRACE_BYTES} are read",
            text.len()
        )));
    }
    let mut cols: Option<(usize, usize, usize)> = None;
    let mut out = Trace::default();
    let mut last = 0.0;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let row = raw.trim().trim_start_matches('\u{feff}');
        if row.is_empty() || row.starts_with('#') {
            continue;
        }
        let cells: Vec<&str> = row.split(',').map(|c| c.trim().trim_matches('"')).collect();
        let (a, b, c) = match cols {
            Some(cs) => cs,
            None => {
                let is_header = cells.iter().any(|c| {
                    c.chars()
                        .any(|ch| ch.is_ascii_alphabetic() && ch != 'e' && ch != 'E')
                });
                if is_header {
                    let header: Vec<String> =
                        cells.iter().map(|c| c.to_ascii_lowercase()).collect();
                    cols = Some((
                        find(&header, ARRIVAL_NAMES, "arrival-time", name)?,
                        find(&header, INPUT_NAMES, "input-tokens", name)?,
                        find(&header, OUTPUT_NAMES, "output-tokens", name)?,
                    ));
                    continue;
                }
                cols = Some((0, 1, 2));
                (0, 1, 2)
            }
        };
        let need = a.max(b).max(c) + 1;
        if cells.len() < need {
            return Err(SimError::new(format!(
                "{name} line {line}: expected at least {need} columns (arrival time, input \
                 tokens, output tokens), got {}",
                cells.len()
            )));
        }
        if out.isl.len() >= MAX_REQUESTS {
            return Err(SimError::new(format!(
                "{name} line {line}: the trace has more than {MAX_REQUESTS} requests"
            )));
        }
        let t: f64 = cells[a].parse().map_err(|_| {
            SimError::new(format!(
                "{name} line {line}: the arrival time must be a number of seconds, got {:?}",
                cells[a]
            ))
        })?;
        if !(t.is_finite() && t >= 0.0) {
            return Err(SimError::new(format!(
                "{name} line {line}: the arrival time must be finite and >= 0, got {:?}",
                cells[a]
            )));
        }
        if t < last {
            return Err(SimError::new(format!(
                "{name} line {line}: arrival times must not decrease ({t} after {last}); sort \
                 the trace by arrival time"
            )));
        }
        last = t;
        out.arrival.push(t);
        out.isl.push(tokens(cells[b], "input tokens", name, line)?);
        out.osl.push(tokens(cells[c], "output tokens", name, line)?);
    }
    if out.isl.is_empty() {
        return Err(SimError::new(format!("{name}: the trace has no requests")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_any_order_and_plain_rows() {
        let t = parse(
            "# a comment\nosl,extra,isl,arrival_s\n5,x,100,0.5\n\n7,y,200,1.25\n",
            "t.csv",
        )
        .unwrap();
        assert_eq!(t.arrival, vec![0.5, 1.25]);
        assert_eq!(t.isl, vec![100, 200]);
        assert_eq!(t.osl, vec![5, 7]);
        let t = parse("0,10,20\n1e-3,11,21\n", "p.csv").unwrap();
        assert_eq!(t.arrival, vec![0.0, 1e-3]);
        assert_eq!(t.osl, vec![20, 21]);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = parse("arrival_s,isl,osl\n0,10,20\n1,ten,20\n", "w.csv").unwrap_err();
        assert!(
            e.message.starts_with("w.csv line 3: input tokens"),
            "{}",
            e.message
        );
        let e = parse("arrival_s,isl,osl\n2,10,20\n1,10,20\n", "w.csv").unwrap_err();
        assert!(e.message.contains("line 3") && e.message.contains("decrease"));
        let e = parse("when,isl,osl\n", "h.csv").unwrap_err();
        assert!(e.message.contains("line 1") && e.message.contains("arrival"));
        let e = parse("0,10\n", "c.csv").unwrap_err();
        assert!(e.message.contains("line 1") && e.message.contains("3 columns"));
        let e = parse("0,10,0\n", "z.csv").unwrap_err();
        assert!(e.message.contains("output tokens"));
        assert!(parse("\n# nothing\n", "e.csv").is_err());
    }
}
