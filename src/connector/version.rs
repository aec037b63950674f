//! vLLM release numbers (`0.33.0`): parsed, compared, printed.

use std::fmt;

/// A vLLM release: up to four numeric components (`0.10.1.1` exists), compared numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub [u32; 4]);

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version([major, minor, patch, 0])
    }

    /// `"0.33.0"` (also `"v0.33.0"`, `"0.33"`). `None` for anything else.
    pub fn parse(text: &str) -> Option<Version> {
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let parts: Vec<&str> = t.split('.').collect();
        if parts.len() < 2 || parts.len() > 4 {
            return None;
        }
        let mut out = [0u32; 4];
        for (slot, part) in out.iter_mut().zip(&parts) {
            if part.is_empty() || part.len() > 6 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            *slot = part.parse().ok()?;
        }
        Some(Version(out))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.0;
        if d == 0 {
            write!(f, "{a}.{b}.{c}")
        } else {
            write!(f, "{a}.{b}.{c}.{d}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_orders() {
        assert_eq!(Version::parse("0.33.0"), Some(Version::new(0, 33, 0)));
        assert_eq!(Version::parse("v0.9"), Some(Version::new(0, 9, 0)));
        assert_eq!(Version::parse("0.10.1.1").unwrap().to_string(), "0.10.1.1");
        assert!(Version::parse("0.11.0").unwrap() < Version::parse("0.11.1").unwrap());
        assert!(Version::parse("0.9.0").unwrap() < Version::parse("0.10.0").unwrap());
        for bad in [
            "",
            "0",
            "latest",
            "0.x.1",
            "1..2",
            "0.1.2.3.4",
            "-1.0",
            "1.0.9999999",
        ] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
    }
}
