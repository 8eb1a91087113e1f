//! The one parser of every duration flag: Go's forms as etcd's and the kubelet's flags take
//! them (`500ms`, `10s`, `1h30m`), read by `humantime`, which also takes spelled-out units
//! (`2 days`). A bare number is seconds, so flags that took seconds before keep their meaning.

use std::time::Duration;

/// Parses a duration flag. The error names the text and the forms that are accepted.
pub fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|e| format!("invalid duration {text:?}: {e}"));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!("invalid duration {text:?}: {e} (expected e.g. 500ms, 10s, 5m or 1h30m)")
    })
}

/// A duration as the flags take it (`1h30m`, `500ms`), for help texts and messages.
pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("2h45m30s"), Ok(Duration::from_secs(9930)));
        assert_eq!(parse("1m30s500ms"), Ok(Duration::from_millis(90_500)));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
    }

    #[test]
    fn bare_numbers_are_seconds() {
        assert_eq!(parse("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse(" 0 "), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_what_was_expected() {
        for bad in ["", "soon", "10 parsecs", "-5s", "5x"] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn format_reads_back() {
        for d in [
            Duration::from_millis(500),
            Duration::from_secs(5400),
            Duration::from_secs(1),
        ] {
            assert_eq!(parse(&format(d)), Ok(d));
        }
    }
}
