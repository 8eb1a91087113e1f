//! CronJob schedules, as Kubernetes' CronJob controller reads them (the standard parser of
//! `robfig/cron`): five fields, `minute hour day-of-month month day-of-week`, each `*`, `?`,
//! a value, a range `a-b`, a step `*/n` or `a-b/n` or `a/n`, or a list of those; months and
//! week days by number or by their three-letter English names; the descriptors `@yearly`
//! (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly`; and `@every
//! <duration>`. The API server validates with [`Schedule::parse`]; the controller asks
//! [`Schedule::next_after`] when to run, in the CronJob's time zone.
//!
//! A day matches as cron's does: when day-of-month and day-of-week are both restricted
//! (neither starts with `*` or `?`), either may match; otherwise both must.

use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeZone, Timelike};

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    Fields(Fields),
    /// `@every <duration>`: at fixed intervals from whenever it is asked.
    Every(Duration),
}

/// The five fields as bit sets, and whether each day field was a wildcard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields {
    minute: u64,
    hour: u64,
    day_of_month: u64,
    month: u64,
    day_of_week: u64,
    /// Day-of-month or day-of-week started with `*` or `?`: both must match.
    either_star: bool,
}

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// How far ahead [`Schedule::next_after`] looks before it gives up (a schedule such as
/// `0 0 30 2 *` never fires).
const HORIZON_YEARS: i32 = 5;

/// One field's values as a bit set; whether it began with a wildcard.
fn field(text: &str, lo: u32, hi: u32, names: &[&str]) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for (i, part) in text.split(',').enumerate() {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step = s
                    .parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("invalid step {s:?} in {part:?}"))?;
                (r, Some(step))
            }
            None => (part, None),
        };
        let value = |v: &str| -> Result<u32, String> {
            let lower = v.to_ascii_lowercase();
            let named = names
                .iter()
                .position(|n| *n == lower)
                .map(|i| u32::try_from(i).expect("invariant: a short list") + lo);
            let n = named
                .or_else(|| v.parse().ok())
                .ok_or_else(|| format!("failed to parse {v:?}"))?;
            if n < lo || n > hi {
                return Err(format!("{n} out of range [{lo}, {hi}]"));
            }
            Ok(n)
        };
        let (start, end) = if range == "*" || range == "?" {
            if i == 0 {
                star = true;
            }
            (lo, hi)
        } else {
            match range.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (value(a)?, value(b)?);
                    if a > b {
                        return Err(format!(
                            "beginning of range ({a}) beyond end of range ({b}): {range}"
                        ));
                    }
                    (a, b)
                }
                // `a/n` runs from a to the end.
                None if step.is_some() => (value(range)?, hi),
                None => {
                    let v = value(range)?;
                    (v, v)
                }
            }
        };
        let step = step.unwrap_or(1);
        let mut v = start;
        while v <= end {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

fn has(bits: u64, v: u32) -> bool {
    bits & (1 << v) != 0
}

impl Schedule {
    /// The schedule `text` says; why not, otherwise (worded as the CronJob validation words it).
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        if let Some(every) = text.strip_prefix("@every ") {
            let d = humantime::parse_duration(every.trim())
                .map_err(|e| format!("invalid duration {every:?}: {e}"))?;
            return Ok(Schedule::Every(d.max(Duration::from_secs(1))));
        }
        let fields = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(format!("unrecognized descriptor: {other}"));
            }
            other => other,
        };
        let parts: Vec<&str> = fields.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(format!(
                "expected exactly 5 fields, found {}: {text}",
                parts.len()
            ));
        }
        let (minute, _) = field(parts[0], 0, 59, &[])?;
        let (hour, _) = field(parts[1], 0, 23, &[])?;
        let (day_of_month, dom_star) = field(parts[2], 1, 31, &[])?;
        let (month, _) = field(parts[3], 1, 12, MONTHS)?;
        let (day_of_week, dow_star) = field(parts[4], 0, 6, DAYS)?;
        Ok(Schedule::Fields(Fields {
            minute,
            hour,
            day_of_month,
            month,
            day_of_week,
            either_star: dom_star || dow_star,
        }))
    }

    /// The first time after `after` that the schedule fires, in `after`'s time zone (a local
    /// time a daylight-saving change skips does not fire; one it repeats fires once, the
    /// first time). `None` if it never fires within [`HORIZON_YEARS`].
    pub fn next_after<Tz: TimeZone>(&self, after: &DateTime<Tz>) -> Option<DateTime<Tz>> {
        let f = match self {
            Schedule::Every(d) => {
                let d = chrono::Duration::from_std(*d).ok()?;
                return Some(after.clone() + d);
            }
            Schedule::Fields(f) => f,
        };
        let zone = after.timezone();
        let local = after.naive_local();
        // The next whole minute.
        let mut t = local.with_second(0)?.with_nanosecond(0)? + chrono::Duration::minutes(1);
        let horizon = local.year() + HORIZON_YEARS;
        while t.year() <= horizon {
            if !has(f.month, t.month()) {
                t = first_of_next_month(t)?;
                continue;
            }
            if !f.day_matches(t) {
                t = (t.date() + chrono::Duration::days(1)).and_hms_opt(0, 0, 0)?;
                continue;
            }
            if !has(f.hour, t.hour()) {
                t = t.with_minute(0)? + chrono::Duration::hours(1);
                continue;
            }
            if !has(f.minute, t.minute()) {
                t += chrono::Duration::minutes(1);
                continue;
            }
            match zone.from_local_datetime(&t) {
                chrono::LocalResult::Single(at) => return Some(at),
                chrono::LocalResult::Ambiguous(first, _) => return Some(first),
                chrono::LocalResult::None => t += chrono::Duration::minutes(1),
            }
        }
        None
    }

    /// The most recent time at or before `now` and after `since` that the schedule fired,
    /// and how many times it fired in that span, counted up to `limit + 1` (a controller
    /// that was down missed them all, and starts only the last).
    pub fn last_between<Tz: TimeZone>(
        &self,
        since: &DateTime<Tz>,
        now: &DateTime<Tz>,
        limit: usize,
    ) -> (Option<DateTime<Tz>>, usize) {
        let walk = |from: &DateTime<Tz>, cap: usize| {
            let mut last = None;
            let mut n = 0;
            let mut t = from.clone();
            while let Some(next) = self.next_after(&t) {
                if next > *now || n > cap {
                    break;
                }
                n += 1;
                last = Some(next.clone());
                t = next;
            }
            (last, n)
        };
        let (last, missed) = walk(since, limit);
        if missed <= limit {
            return (last, missed);
        }
        // Too many to walk: the latest is in the shortest span before `now` that holds
        // one (doubled from a minute), and that span holds few.
        let mut span = chrono::Duration::minutes(1);
        while now.clone() - span > *since {
            let from = now.clone() - span;
            if let (Some(latest), _) = walk(&from, usize::MAX) {
                return (Some(latest), missed);
            }
            span = span * 2;
        }
        (last, missed)
    }
}

impl Fields {
    fn day_matches(&self, t: NaiveDateTime) -> bool {
        let dom = has(self.day_of_month, t.day());
        let dow = has(self.day_of_week, t.weekday().num_days_from_sunday());
        if self.either_star {
            dom && dow
        } else {
            dom || dow
        }
    }
}

fn first_of_next_month(t: NaiveDateTime) -> Option<NaiveDateTime> {
    let (y, m) = if t.month() == 12 {
        (t.year() + 1, 1)
    } else {
        (t.year(), t.month() + 1)
    };
    NaiveDate::from_ymd_opt(y, m, 1)?.and_hms_opt(0, 0, 0)
}

/// The time zone called `name` in the IANA database (`Europe/Berlin`), or UTC for none.
pub fn time_zone(name: Option<&str>) -> Result<chrono_tz::Tz, String> {
    match name {
        None | Some("") => Ok(chrono_tz::Tz::UTC),
        Some(n) => n
            .parse::<chrono_tz::Tz>()
            .map_err(|_| format!("unknown time zone {n}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next(schedule: &str, after: &str) -> String {
        Schedule::parse(schedule)
            .unwrap()
            .next_after(&at(after))
            .unwrap()
            .to_rfc3339()
    }

    #[test]
    fn schedules_fire_when_cron_would() {
        assert_eq!(
            next("*/15 * * * *", "2026-01-01T10:07:30Z"),
            "2026-01-01T10:15:00+00:00"
        );
        assert_eq!(
            next("0 9 * * mon-fri", "2026-01-02T09:00:00Z"),
            "2026-01-05T09:00:00+00:00"
        );
        assert_eq!(
            next("@monthly", "2026-01-31T12:00:00Z"),
            "2026-02-01T00:00:00+00:00"
        );
        assert_eq!(
            next("30 2 29 2 *", "2026-01-01T00:00:00Z"),
            "2028-02-29T02:30:00+00:00"
        );
        // Both day fields restricted: either matches (the 13th, or a Friday).
        assert_eq!(
            next("0 0 13 * 5", "2026-02-01T00:00:00Z"),
            "2026-02-06T00:00:00+00:00"
        );
        // One a wildcard: both must.
        assert_eq!(
            next("0 0 */1 * 5", "2026-02-01T00:00:00Z"),
            "2026-02-06T00:00:00+00:00"
        );
        assert_eq!(
            next("5/20 * * * *", "2026-01-01T00:06:00Z"),
            "2026-01-01T00:25:00+00:00"
        );
        assert!(
            Schedule::parse("0 0 30 2 *")
                .unwrap()
                .next_after(&at("2026-01-01T00:00:00Z"))
                .is_none()
        );
    }

    #[test]
    fn a_time_zone_moves_the_schedule_and_its_daylight_saving() {
        let berlin = time_zone(Some("Europe/Berlin")).unwrap();
        let s = Schedule::parse("0 9 * * *").unwrap();
        let after = at("2026-07-01T00:00:00Z").with_timezone(&berlin);
        assert_eq!(
            s.next_after(&after)
                .unwrap()
                .with_timezone(&Utc)
                .to_rfc3339(),
            "2026-07-01T07:00:00+00:00"
        );
        // 02:30 does not exist in Berlin on 2026-03-29: the next is a day later.
        let s = Schedule::parse("30 2 * * *").unwrap();
        let after = at("2026-03-28T12:00:00Z").with_timezone(&berlin);
        assert_eq!(
            s.next_after(&after)
                .unwrap()
                .with_timezone(&Utc)
                .to_rfc3339(),
            "2026-03-30T00:30:00+00:00"
        );
        assert!(time_zone(Some("Mars/Olympus")).is_err());
    }

    #[test]
    fn bad_schedules_are_refused_naming_why() {
        for (bad, why) in [
            ("* * * *", "expected exactly 5 fields"),
            ("60 * * * *", "out of range"),
            ("*/0 * * * *", "invalid step"),
            ("5-1 * * * *", "beyond end of range"),
            ("@fortnightly", "unrecognized descriptor"),
            ("0 0 * foo *", "failed to parse"),
        ] {
            let e = Schedule::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(Schedule::parse("@every 90s").is_ok());
        assert!(Schedule::parse("0 0 * JAN,jul SUN").is_ok());
    }

    #[test]
    fn the_last_missed_time_is_found_and_counted() {
        let s = Schedule::parse("*/10 * * * *").unwrap();
        let (last, missed) = s.last_between(
            &at("2026-01-01T00:00:00Z"),
            &at("2026-01-01T00:35:00Z"),
            100,
        );
        assert_eq!(last.unwrap().to_rfc3339(), "2026-01-01T00:30:00+00:00");
        assert_eq!(missed, 3);
        // A long outage: counted up to the limit, and still the latest time.
        let s = Schedule::parse("* * * * *").unwrap();
        let (last, missed) = s.last_between(
            &at("2026-01-01T00:00:00Z"),
            &at("2026-01-03T07:41:30Z"),
            100,
        );
        assert_eq!(last.unwrap().to_rfc3339(), "2026-01-03T07:41:00+00:00");
        assert_eq!(missed, 101);
    }
}
