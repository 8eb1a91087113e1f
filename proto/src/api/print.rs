//! What tables print, as kubectl prints it: ages and durations.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

/// A duration the way kubectl prints ages (apimachinery's `duration.HumanDuration`): about
/// two significant figures, `45s`, `3m20s`, `5h`, `2d3h`, `400d`, `3y20d`. Clocks a second
/// apart count as now; a time further in the future is `<invalid>`.
pub fn human_duration(d: TimeDelta) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d.num_minutes();
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d.num_hours();
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The time at a JSON pointer (RFC 3339, as the API writes `Time`); absent, null and
/// unparsable all read as Go's zero time.
pub fn time(object: &Value, pointer: &str) -> Option<DateTime<Utc>> {
    let text = object.pointer(pointer)?.as_str()?;
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The time since `t` as kubectl prints ages, or `<unknown>` for the zero time.
pub fn since(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    t.map_or_else(|| "<unknown>".to_owned(), |t| human_duration(now - t))
}

/// The string at a JSON pointer, or `""` (Go's zero value, which printers test for).
pub fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The integer at a JSON pointer, or 0.
pub fn number(object: &Value, pointer: &str) -> i64 {
    object
        .pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

/// A string, or `<none>` when it is empty, as kubectl prints a field with no value.
pub fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".to_owned()
    } else {
        s.to_owned()
    }
}
