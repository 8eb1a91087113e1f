//! A CRD schema's validation rules: `x-kubernetes-validations`, each a CEL expression over
//! the value at its node (`self`) that must hold, as kube-apiserver evaluates them.
//!
//! ```yaml
//! x-kubernetes-validations:
//! - rule: self.minReplicas <= self.replicas
//!   message: replicas must be at least minReplicas      # or messageExpression
//!   fieldPath: .replicas                                # where the error points
//!   reason: FieldValueInvalid                           # Required, Forbidden, Duplicate
//! - rule: self == oldSelf                               # a transition rule: on updates only
//! ```
//!
//! A rule is compiled when its CRD is written (one that does not parse is refused, naming
//! it) and once per process after that. Rules run after the structural checks pass, at each
//! node of the object the schema gives rules to; a node that is absent or null runs none. A
//! rule that names `oldSelf` compares with the stored object: it runs on an update, where the
//! node was there before too (through properties, map keys and `x-kubernetes-list-type: map`
//! items matched by their keys; items of other lists have no old value).
//!
//! CEL's standard definitions are served, with these of Kubernetes' libraries: the string
//! functions `lowerAscii`, `upperAscii`, `trim`, `split`, `indexOf`, `lastIndexOf`,
//! `replace` and `join` on lists of strings, and the list functions `isSorted`, `sum`,
//! `indexOf` and `lastIndexOf`. A rule that fails to evaluate (a field read without
//! `has()`) is an error at its node, as in Kubernetes. Not served: cost limits,
//! `optionalOldSelf`, and Kubernetes' `url`, `quantity`, `ip`, `cidr` and `format` libraries.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use cel::extractors::{Arguments, This};
use cel::objects::Value as Cel;
use cel::{Context, ExecutionError, Program};
use serde_json::{Map, Value};

use crate::api::validation::{Errors, Path};

/// The extension that holds a node's rules.
pub const VALIDATIONS: &str = "x-kubernetes-validations";

/// Compiled rules kept at most; the cache starts again when it fills.
const CACHED: usize = 4096;

/// Each rule's compiled program (or why it does not compile), by its text.
type Compiled = Result<Arc<Program>, String>;

static PROGRAMS: LazyLock<Mutex<HashMap<String, Compiled>>> = LazyLock::new(Mutex::default);

/// The program of `source`, compiled once.
fn compile(source: &str) -> Compiled {
    let mut programs = PROGRAMS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(p) = programs.get(source) {
        return p.clone();
    }
    if programs.len() >= CACHED {
        programs.clear();
    }
    let compiled = Program::compile(source)
        .map(Arc::new)
        .map_err(|e| e.to_string().trim().to_owned());
    programs.insert(source.to_owned(), compiled.clone());
    compiled
}

/// Whether a program reads the stored value: a transition rule.
fn is_transition(program: &Program) -> bool {
    program.references().has_variable("oldSelf")
}

fn text<'a>(rule: &'a Value, field: &str) -> Option<&'a str> {
    rule.get(field).and_then(Value::as_str)
}

/// The reasons a rule may give its failures, as kube-apiserver takes them.
const REASONS: [&str; 4] = [
    "FieldValueInvalid",
    "FieldValueForbidden",
    "FieldValueRequired",
    "FieldValueDuplicate",
];

/// The checks of a CRD's schema node's rules: each has a rule that compiles, messages and
/// reasons that are valid; at `path` (the node's `x-kubernetes-validations`).
pub(crate) fn check(errs: &mut Errors, path: &Path, schema: &Value) {
    let Some(rules) = schema.get(VALIDATIONS) else {
        return;
    };
    let path = path.field(VALIDATIONS);
    let Some(rules) = rules.as_array() else {
        errs.add(&path, "must be a list of rules");
        return;
    };
    for (i, rule) in rules.iter().enumerate() {
        let at = path.index(i);
        match text(rule, "rule") {
            None | Some("") => errs.add(&at.field("rule"), "Required value"),
            Some(source) => {
                if let Err(e) = compile(source) {
                    errs.add(
                        &at.field("rule"),
                        format!("Invalid value: {source:?}: compilation failed: {e}"),
                    );
                }
            }
        }
        if let Some(expression) = text(rule, "messageExpression")
            && let Err(e) = compile(expression)
        {
            errs.add(
                &at.field("messageExpression"),
                format!("Invalid value: {expression:?}: compilation failed: {e}"),
            );
        }
        if let Some(message) = text(rule, "message")
            && (message.trim().is_empty() || message.contains('\n'))
        {
            errs.add(
                &at.field("message"),
                format!(
                    "Invalid value: {message:?}: message must be non-empty and may not contain \
                     line breaks"
                ),
            );
        }
        if let Some(reason) = text(rule, "reason")
            && !REASONS.contains(&reason)
        {
            errs.one_of(&at.field("reason"), reason, &REASONS);
        }
    }
}

/// Runs the rules of `schema` and its children on `value` at `path`, with the value the
/// stored object had there (`old`: none on a create, or where the node is new). A node whose
/// value is unchanged runs none of its rules (ratcheting); a transition rule runs only where
/// there is an old value. Subtrees whose schema has no rules are not walked.
pub(crate) fn validate(
    errs: &mut Errors,
    path: &Path,
    value: &Value,
    old: Option<&Value>,
    schema: &Value,
) {
    if value.is_null() || old == Some(value) {
        return;
    }
    if let Some(rules) = schema.get(VALIDATIONS).and_then(Value::as_array) {
        node_rules(errs, path, value, old, schema, rules);
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|s| has_rules(s));
            for (k, v) in map {
                let before = old.and_then(|o| o.get(k));
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    if has_rules(s) {
                        validate(errs, &path.field(k), v, before, s);
                    }
                } else if let Some(s) = extra {
                    validate(errs, &path.key(k), v, before, s);
                }
            }
        }
        Value::Array(items) => {
            let Some(s) = schema.get("items").filter(|s| has_rules(s)) else {
                return;
            };
            // The stored items by their keys, for a list map's transition rules (one pass,
            // not one search per item).
            let keys = list_map_keys(schema);
            let stored: HashMap<String, &Value> = match (&keys, old.and_then(Value::as_array)) {
                (Some(keys), Some(old)) => old.iter().map(|o| (key_text(o, keys), o)).collect(),
                _ => HashMap::new(),
            };
            for (i, item) in items.iter().enumerate() {
                let before = keys
                    .as_ref()
                    .and_then(|keys| stored.get(&key_text(item, keys)).copied());
                validate(errs, &path.index(i), item, before, s);
            }
        }
        _ => {}
    }
}

/// Whether `schema` or anything under it has rules.
fn has_rules(schema: &Value) -> bool {
    let Some(map) = schema.as_object() else {
        return false;
    };
    map.contains_key(VALIDATIONS)
        || map
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| p.values().any(has_rules))
        || map.get("items").is_some_and(has_rules)
        || map.get("additionalProperties").is_some_and(has_rules)
}

/// An item's values of a list map's keys, as one string to look it up by.
fn key_text(item: &Value, keys: &[&str]) -> String {
    let values: Vec<Option<&Value>> = keys.iter().map(|k| item.get(k)).collect();
    serde_json::to_string(&values).unwrap_or_default()
}

/// The keys of a `x-kubernetes-list-type: map` list's items.
fn list_map_keys(schema: &Value) -> Option<Vec<&str>> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    let keys = schema.get("x-kubernetes-list-map-keys")?.as_array()?;
    Some(keys.iter().filter_map(Value::as_str).collect())
}

/// The schema type a failure names (`Invalid value: "object": …`).
fn type_name(schema: &Value, value: &Value) -> &'static str {
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => "object",
        Some("array") => "array",
        Some("string") => "string",
        Some("integer") => "integer",
        Some("number") => "number",
        Some("boolean") => "boolean",
        _ => match value {
            Value::Object(_) => "object",
            Value::Array(_) => "array",
            Value::String(_) => "string",
            Value::Number(n) if n.is_f64() => "number",
            Value::Number(_) => "integer",
            _ => "boolean",
        },
    }
}

/// The rules of one node on its value: one scope for them all, with `self` (and `oldSelf`,
/// for the transition rules, where there is an old value).
fn node_rules(
    errs: &mut Errors,
    path: &Path,
    value: &Value,
    old: Option<&Value>,
    schema: &Value,
    rules: &[Value],
) {
    // The CRD's checks refused a rule that does not compile; one stored before them is
    // skipped rather than failing every write.
    let programs: Vec<(&Value, &str, Arc<Program>)> = rules
        .iter()
        .filter_map(|rule| {
            let source = text(rule, "rule")?;
            let program = compile(source).ok()?;
            // A transition rule needs a value to compare with.
            (old.is_some() || !is_transition(&program)).then_some((rule, source, program))
        })
        .collect();
    if programs.is_empty() {
        return;
    }
    let mut scope = FUNCTIONS.new_inner_scope();
    if scope.add_variable("self", value).is_err() {
        return;
    }
    if let Some(old) = old
        && programs.iter().any(|(_, _, p)| is_transition(p))
        && scope.add_variable("oldSelf", old).is_err()
    {
        return;
    }
    for (rule, source, program) in programs {
        run(errs, path, value, schema, rule, source, &program, &scope);
    }
}

/// One rule on one value, in its node's scope.
#[allow(clippy::too_many_arguments)]
fn run(
    errs: &mut Errors,
    path: &Path,
    value: &Value,
    schema: &Value,
    rule: &Value,
    source: &str,
    program: &Program,
    ctx: &Context,
) {
    let at = match text(rule, "fieldPath") {
        Some(field_path) => relative(path, field_path),
        None => path.clone(),
    };
    let failed = match program.execute(ctx) {
        Ok(Cel::Bool(true)) => return,
        Ok(Cel::Bool(false)) => message(rule, ctx, source),
        Ok(other) => format!(
            "rule {source:?} must evaluate to a bool, not {}",
            other.type_of()
        ),
        Err(e) => format!("{} evaluating rule: {source}", evaluation_error(&e)),
    };
    let reason = text(rule, "reason").unwrap_or("FieldValueInvalid");
    let kind = type_name(schema, value);
    errs.add(
        &at,
        match reason {
            "FieldValueRequired" => format!("Required value: {failed}"),
            "FieldValueForbidden" => format!("Forbidden: {failed}"),
            "FieldValueDuplicate" => format!("Duplicate value: {kind:?}: {failed}"),
            _ => format!("Invalid value: {kind:?}: {failed}"),
        },
    );
}

fn evaluation_error(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        other => other.to_string(),
    }
}

/// A failed rule's message: its `messageExpression`'s string, else its `message`, else
/// `failed rule: <rule>`.
fn message(rule: &Value, ctx: &Context, source: &str) -> String {
    if let Some(expression) = text(rule, "messageExpression")
        && let Ok(program) = compile(expression)
        && let Ok(Cel::String(s)) = program.execute(ctx)
        && !s.trim().is_empty()
    {
        return s.to_string();
    }
    text(rule, "message")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("failed rule: {source}"))
}

/// `fieldPath` (`.spec.replicas`, `.ports[0]`, `['key']`) under `path`.
fn relative(path: &Path, field_path: &str) -> Path {
    let mut at = path.clone();
    let mut rest = field_path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            at = at.field(&r[..end]);
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').unwrap_or(r.len());
            let inner = r[..end].trim_matches(|c| c == '\'' || c == '"');
            at = match inner.parse::<usize>() {
                Ok(i) => at.index(i),
                Err(_) => at.key(inner),
            };
            rest = r.get(end + 1..).unwrap_or_default();
        } else {
            return at.field(rest);
        }
    }
    at
}

/// CEL's standard functions and Kubernetes' string and list functions, made once; each node's
/// rules run in a scope of it that adds `self` and `oldSelf`.
static FUNCTIONS: LazyLock<Context<'static>> = LazyLock::new(|| {
    let mut ctx = Context::default();
    ctx.add_function("lowerAscii", |This(s): This<Arc<String>>| {
        s.to_ascii_lowercase()
    });
    ctx.add_function("upperAscii", |This(s): This<Arc<String>>| {
        s.to_ascii_uppercase()
    });
    ctx.add_function("trim", |This(s): This<Arc<String>>| s.trim().to_owned());
    ctx.add_function("split", split);
    ctx.add_function("replace", replace);
    ctx.add_function("join", join);
    ctx.add_function("isSorted", is_sorted);
    ctx.add_function("sum", sum);
    ctx.add_function(
        "indexOf",
        |This(this): This<Cel>, Arguments(args): Arguments| index_of(this, &args, false),
    );
    ctx.add_function(
        "lastIndexOf",
        |This(this): This<Cel>, Arguments(args): Arguments| index_of(this, &args, true),
    );
    ctx
});

fn string_arg(args: &[Cel], i: usize, function: &str) -> Result<Arc<String>, ExecutionError> {
    match args.get(i) {
        Some(Cel::String(s)) => Ok(s.clone()),
        _ => Err(ExecutionError::function_error(
            function,
            format!("argument {} must be a string", i + 1),
        )),
    }
}

/// `"a,b".split(",")`, and `split(sep, n)` keeping at most `n` pieces.
fn split(This(s): This<Arc<String>>, Arguments(args): Arguments) -> Result<Cel, ExecutionError> {
    let sep = string_arg(&args, 0, "split")?;
    let pieces: Vec<Cel> = match args.get(1) {
        Some(Cel::Int(n)) if *n >= 0 => s
            .splitn(usize::try_from(*n).unwrap_or(usize::MAX), sep.as_str())
            .map(|p| Cel::String(Arc::new(p.to_owned())))
            .collect(),
        _ => s
            .split(sep.as_str())
            .map(|p| Cel::String(Arc::new(p.to_owned())))
            .collect(),
    };
    Ok(Cel::List(Arc::new(pieces)))
}

/// `"aab".replace("a", "c")`, and `replace(old, new, n)` replacing the first `n`.
fn replace(This(s): This<Arc<String>>, Arguments(args): Arguments) -> Result<Cel, ExecutionError> {
    let from = string_arg(&args, 0, "replace")?;
    let to = string_arg(&args, 1, "replace")?;
    let replaced = match args.get(2) {
        Some(Cel::Int(n)) if *n >= 0 => s.replacen(
            from.as_str(),
            &to,
            usize::try_from(*n).unwrap_or(usize::MAX),
        ),
        _ => s.replace(from.as_str(), &to),
    };
    Ok(Cel::String(Arc::new(replaced)))
}

/// `["a", "b"].join()`, `join(", ")`.
fn join(
    This(list): This<Arc<Vec<Cel>>>,
    Arguments(args): Arguments,
) -> Result<Cel, ExecutionError> {
    let sep = match args.first() {
        Some(_) => string_arg(&args, 0, "join")?,
        None => Arc::new(String::new()),
    };
    let mut pieces = Vec::with_capacity(list.len());
    for item in list.iter() {
        match item {
            Cel::String(s) => pieces.push(s.as_str()),
            _ => {
                return Err(ExecutionError::function_error(
                    "join",
                    "the list must hold strings",
                ));
            }
        }
    }
    Ok(Cel::String(Arc::new(pieces.join(&sep))))
}

fn is_sorted(This(list): This<Arc<Vec<Cel>>>) -> Result<Cel, ExecutionError> {
    for pair in list.windows(2) {
        match pair[0].partial_cmp(&pair[1]) {
            Some(std::cmp::Ordering::Greater) => return Ok(Cel::Bool(false)),
            Some(_) => {}
            None => {
                return Err(ExecutionError::ValuesNotComparable(
                    pair[0].clone(),
                    pair[1].clone(),
                ));
            }
        }
    }
    Ok(Cel::Bool(true))
}

/// The sum of a list of numbers of one type (0 for an empty list).
fn sum(This(list): This<Arc<Vec<Cel>>>) -> Result<Cel, ExecutionError> {
    let mut total = Cel::Int(0);
    for (i, item) in list.iter().enumerate() {
        total = match (total, item) {
            (Cel::Int(a), Cel::Int(b)) => Cel::Int(
                a.checked_add(*b)
                    .ok_or_else(|| ExecutionError::function_error("sum", "integer overflow"))?,
            ),
            (Cel::Int(0), Cel::UInt(b)) if i == 0 => Cel::UInt(*b),
            (Cel::UInt(a), Cel::UInt(b)) => Cel::UInt(
                a.checked_add(*b)
                    .ok_or_else(|| ExecutionError::function_error("sum", "integer overflow"))?,
            ),
            (Cel::Int(0), Cel::Float(b)) if i == 0 => Cel::Float(*b),
            (Cel::Float(a), Cel::Float(b)) => Cel::Float(a + b),
            _ => {
                return Err(ExecutionError::function_error(
                    "sum",
                    "the list must hold numbers of one type",
                ));
            }
        };
    }
    Ok(total)
}

/// A string's `indexOf(sub)` in characters, or a list's `indexOf(value)`; -1 when absent.
fn index_of(this: Cel, args: &[Cel], last: bool) -> Result<Cel, ExecutionError> {
    let function = if last { "lastIndexOf" } else { "indexOf" };
    let found = match (&this, args.first()) {
        (Cel::String(s), Some(Cel::String(sub))) => {
            let byte = if last {
                s.rfind(sub.as_str())
            } else {
                s.find(sub.as_str())
            };
            byte.map(|b| s[..b].chars().count())
        }
        (Cel::List(items), Some(value)) => {
            if last {
                items.iter().rposition(|i| i == value)
            } else {
                items.iter().position(|i| i == value)
            }
        }
        _ => {
            return Err(ExecutionError::function_error(
                function,
                "takes a string in a string, or a value in a list",
            ));
        }
    };
    Ok(Cel::Int(
        found.map_or(-1, |i| i64::try_from(i).unwrap_or(i64::MAX)),
    ))
}

/// The value rules see at the root: the object's fields, with `apiVersion`, `kind` and, of
/// its metadata, `name` and `generateName` (as Kubernetes lets rules see them).
pub(crate) fn root_value(
    api_version: &str,
    kind: &str,
    name: &str,
    generate_name: &str,
    body: &Map<String, Value>,
) -> Value {
    let mut root = body.clone();
    root.insert("apiVersion".into(), Value::from(api_version));
    root.insert("kind".into(), Value::from(kind));
    let mut metadata = Map::new();
    if !name.is_empty() {
        metadata.insert("name".into(), Value::from(name));
    }
    if !generate_name.is_empty() {
        metadata.insert("generateName".into(), Value::from(generate_name));
    }
    root.insert("metadata".into(), Value::Object(metadata));
    Value::Object(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(value: Value, old: Option<Value>, schema: Value) -> Vec<String> {
        let mut errs = Errors::default();
        validate(&mut errs, &Path::root(""), &value, old.as_ref(), &schema);
        errs.into_vec().iter().map(ToString::to_string).collect()
    }

    fn spec_schema(rules: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": rules,
        "properties": {
            "replicas": {"type": "integer"},
            "minReplicas": {"type": "integer"},
            "name": {"type": "string"},
            "ports": {"type": "array", "items": {"type": "object"}},
        }}}})
    }

    #[test]
    fn a_rule_that_does_not_hold_names_its_node_and_message() {
        let schema = spec_schema(json!([
            {"rule": "self.minReplicas <= self.replicas", "message": "replicas must be at least minReplicas"},
            {"rule": "self.name.startsWith('web') && self.name.lowerAscii() == self.name"},
            {"rule": "size(self.ports) <= 1", "fieldPath": ".ports", "reason": "FieldValueForbidden"},
            {"rule": "self.replicas < 10", "messageExpression": "'replicas is ' + string(self.replicas)"},
        ]));
        let good = json!({"spec": {"replicas": 3, "minReplicas": 2, "name": "web", "ports": [{}]}});
        assert_eq!(errors(good, None, schema.clone()), Vec::<String>::new());
        let bad =
            json!({"spec": {"replicas": 10, "minReplicas": 20, "name": "Web", "ports": [{}, {}]}});
        assert_eq!(
            errors(bad, None, schema),
            [
                "spec: Invalid value: \"object\": replicas must be at least minReplicas",
                "spec: Invalid value: \"object\": failed rule: self.name.startsWith('web') && self.name.lowerAscii() == self.name",
                "spec.ports: Forbidden: failed rule: size(self.ports) <= 1",
                "spec: Invalid value: \"object\": replicas is 10",
            ]
        );
    }

    #[test]
    fn a_field_read_without_has_is_an_error_and_has_guards_it() {
        let schema = spec_schema(
            json!([{"rule": "self.replicas > 0"}, {"rule": "!has(self.name) || self.name != ''"}]),
        );
        let out = errors(json!({"spec": {"name": "x"}}), None, schema);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].starts_with(
                "spec: Invalid value: \"object\": no such key: replicas evaluating rule"
            ),
            "{out:?}"
        );
    }

    #[test]
    fn transition_rules_run_on_updates_where_there_was_a_value() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "name is immutable"}]},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                      "items": {"type": "object", "properties": {"protocol": {"type": "string",
                          "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}},
        }}}});
        let new = json!({"spec": {"name": "b", "ports": [{"port": 2, "protocol": "UDP"}, {"port": 1, "protocol": "UDP"}]}});
        // A create runs no transition rule; an unchanged object runs none.
        assert!(errors(new.clone(), None, schema.clone()).is_empty());
        assert!(errors(new.clone(), Some(new.clone()), schema.clone()).is_empty());
        let old = json!({"spec": {"name": "a", "ports": [{"port": 1, "protocol": "TCP"}]}});
        assert_eq!(
            errors(new, Some(old), schema),
            [
                "spec.name: Invalid value: \"string\": name is immutable",
                "spec.ports[1].protocol: Invalid value: \"string\": failed rule: self == oldSelf",
            ]
        );
    }

    #[test]
    fn kubernetes_list_and_string_functions() {
        let holds = |rule: &str, value: Value| {
            let schema = json!({"type": "object", "x-kubernetes-validations": [{"rule": rule}]});
            errors(json!({"v": value}), None, schema).is_empty()
        };
        assert!(holds(
            "self.v.isSorted() && self.v.sum() == 6 && self.v.indexOf(2) == 1",
            json!([1, 2, 3])
        ));
        assert!(!holds("self.v.isSorted()", json!([3, 1])));
        assert!(holds(
            "self.v.split(',').join('-') == 'a-b' && self.v.indexOf('b') == 2",
            json!("a,b")
        ));
        assert!(holds(
            "self.v.trim().upperAscii().replace('A', 'X') == 'XB'",
            json!(" ab ")
        ));
    }

    #[test]
    fn rules_that_do_not_compile_or_say_too_little_are_refused() {
        let mut errs = Errors::default();
        let schema = json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "self.a >"}, {"message": "m"}, {"rule": "true", "reason": "Sideways"},
            {"rule": "true", "message": "two\nlines"},
        ]});
        check(&mut errs, &Path::root("schema"), &schema);
        let out: Vec<String> = errs.into_vec().iter().map(ToString::to_string).collect();
        assert_eq!(out.len(), 4, "{out:?}");
        assert!(out[0].starts_with("schema.x-kubernetes-validations[0].rule: Invalid value: \"self.a >\": compilation failed"), "{out:?}");
        assert_eq!(
            out[1],
            "schema.x-kubernetes-validations[1].rule: Required value"
        );
        assert!(
            out[2].starts_with("schema.x-kubernetes-validations[2].reason"),
            "{out:?}"
        );
        assert!(
            out[3].starts_with("schema.x-kubernetes-validations[3].message"),
            "{out:?}"
        );
    }

    #[test]
    fn field_paths_are_relative_to_the_node() {
        let at = relative(&Path::root("spec"), ".ports[0].name");
        assert_eq!(
            format!("{at:?}"),
            format!(
                "{:?}",
                Path::root("spec").field("ports").index(0).field("name")
            )
        );
        let at = relative(&Path::root("spec"), "['a.b']");
        assert_eq!(
            format!("{at:?}"),
            format!("{:?}", Path::root("spec").key("a.b"))
        );
    }
}
