//! What a simulated container does, read from its command: the shell words a busybox image
//! would run (see the table in [`super`]), and exec commands against its files.

use std::collections::BTreeSet;
use std::time::Duration;

use skiff_proto::api::Time;

use crate::runtime::Exit;

/// What a container will do, read from its command.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Plan {
    /// `None`: runs until stopped.
    pub(super) run_for: Option<Duration>,
    pub(super) exit_code: i32,
    /// Ends OOMKilled when it would exit.
    pub(super) oom: bool,
    pub(super) ignore_term: bool,
    pub(super) lines: Vec<String>,
}

/// The script a command runs: `sh -c SCRIPT` gives SCRIPT, anything else its words.
fn script_of(command: &[String]) -> String {
    let is_shell = command
        .first()
        .is_some_and(|c| c == "sh" || c.ends_with("/sh"));
    if is_shell && command.get(1).is_some_and(|a| a == "-c") {
        command[2..].join(" ")
    } else {
        command.join(" ")
    }
}

fn statements(script: &str) -> impl Iterator<Item = &str> {
    script
        .split([';', '\n'])
        .flat_map(|s| s.split("&&"))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

impl Plan {
    pub(super) fn parse(command: &[String], memory_limited: bool) -> Plan {
        /// Commands that finish at once with status 0 in a script.
        const ONE_SHOT: &[&str] = &[
            "mkdir", "cp", "mv", "rm", "touch", "cat", "ls", "test", "[", "wc", "date", "env",
            "printf", "export", "cd", "chmod", "ln", "head", "grep", "sed", "hostname", ":",
        ];
        let script = script_of(command);
        let mut plan = Plan::default();
        if script.trim().is_empty() {
            return plan;
        }
        let mut total = Duration::ZERO;
        let mut forever = false;
        for stmt in statements(&script) {
            let words: Vec<&str> = stmt.split_whitespace().collect();
            match words.as_slice() {
                ["sleep", "infinity", ..] => forever = true,
                ["sleep", n, ..] => {
                    total += n
                        .parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        .map_or(Duration::ZERO, Duration::from_secs_f64)
                }
                ["exit", n, ..] => {
                    plan.exit_code = n.parse().unwrap_or(2);
                    break;
                }
                ["exit"] => break,
                ["true"] => plan.exit_code = 0,
                ["false"] => plan.exit_code = 1,
                ["echo", rest @ ..] => {
                    plan.lines
                        .push(rest.join(" ").trim_matches(['"', '\'']).to_string());
                    plan.exit_code = 0;
                }
                ["trap", .., "TERM"] => plan.ignore_term = true,
                ["tail", "/dev/zero", ..] => {
                    if memory_limited {
                        plan.oom = true;
                        break;
                    }
                    forever = true;
                }
                [cmd, ..] if ONE_SHOT.contains(cmd) => plan.exit_code = 0,
                // A program the simulation does not model (a server: httpd, nc -l, …)
                // runs until stopped, as a real one would.
                _ => forever = true,
            }
            if forever {
                break;
            }
        }
        plan.run_for = (!forever).then_some(total);
        plan
    }
}

/// What one exec statement did.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Step {
    pub(super) status: i32,
    pub(super) stdout: String,
    pub(super) stderr: String,
    /// `sleep N`: how long the statement takes in an interactive session.
    pub(super) pause: Duration,
    /// `exit`: the script ends here with `status`.
    pub(super) exit: bool,
}

/// Runs one statement of an exec command against a container's files.
pub(super) fn step(files: &mut BTreeSet<String>, stmt: &str) -> Step {
    let words: Vec<&str> = stmt.split_whitespace().collect();
    let status = |status| Step {
        status,
        ..Step::default()
    };
    match words.as_slice() {
        ["true"] | [":"] => status(0),
        ["false"] => status(1),
        ["exit"] => Step {
            exit: true,
            ..status(0)
        },
        ["exit", n, ..] => Step {
            exit: true,
            ..status(n.parse().unwrap_or(2))
        },
        ["touch", paths @ ..] => {
            files.extend(paths.iter().map(|p| p.to_string()));
            status(0)
        }
        ["rm", paths @ ..] => {
            for p in paths.iter().filter(|p| !p.starts_with('-')) {
                files.remove(*p);
            }
            status(0)
        }
        ["cat" | "ls", path] | ["test", "-e" | "-f", path] => {
            let found = files.contains(*path);
            Step {
                stderr: if found || words[0] == "test" {
                    String::new()
                } else {
                    format!("{}: {path}: No such file or directory\n", words[0])
                },
                ..status(i32::from(!found))
            }
        }
        ["echo", rest @ ..] => Step {
            stdout: format!("{}\n", rest.join(" ").replace(['"', '\''], "")),
            ..status(0)
        },
        ["sleep", n, ..] => Step {
            pause: n
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map_or(Duration::ZERO, Duration::from_secs_f64),
            ..status(0)
        },
        [cmd, ..] => Step {
            stderr: format!("sh: {cmd}: not found\n"),
            ..status(127)
        },
        [] => status(0),
    }
}

/// The statements of an exec command, for a session that runs them one at a time.
pub(super) fn exec_statements(command: &[String]) -> Vec<String> {
    statements(&script_of(command)).map(String::from).collect()
}

/// Whether `command` is a shell that reads its script from standard input (`sh`, `/bin/sh`).
pub(super) fn is_interactive_shell(command: &[String]) -> bool {
    matches!(command, [one] if one == "sh" || one.ends_with("/sh"))
}

/// Runs an exec command against a container's files (for probes and hooks): its status and
/// everything it printed.
pub(super) fn exec_in(files: &mut BTreeSet<String>, command: &[String]) -> (i32, Vec<u8>) {
    let mut status = 0;
    let mut output = Vec::new();
    for stmt in statements(&script_of(command)) {
        let s = step(files, stmt);
        output.extend(s.stdout.bytes().chain(s.stderr.bytes()));
        status = s.status;
        if s.exit {
            break;
        }
    }
    (status, output)
}

pub(super) fn exit_of(plan: &Plan, started: Option<Time>, now: Time) -> Exit {
    let (exit_code, reason) = if plan.oom {
        (137, "OOMKilled")
    } else if plan.exit_code == 0 {
        (0, "Completed")
    } else {
        (plan.exit_code, "Error")
    };
    Exit {
        exit_code,
        reason: reason.into(),
        message: String::new(),
        started_at: started,
        finished_at: Some(now),
    }
}
