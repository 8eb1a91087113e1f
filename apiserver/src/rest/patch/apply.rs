//! Server-side apply (`kubectl apply --server-side`, `application/apply-patch+yaml`): the
//! applied configuration is the set of fields its manager wants to own, with their values.
//!
//! Ownership is recorded per manager in `metadata.managedFields`, as Kubernetes records it
//! (`fieldsType: FieldsV1`: a tree of `f:<field>`, `k:<merge key as JSON>` for an element of a
//! keyed list, `v:<value>` for an element of a set, `.` for the element itself). An apply:
//!
//! 1. refuses (409, one cause per field) to change a field another manager owns to a value it
//!    does not have now, unless `force` takes the field over;
//! 2. merges the configuration into the object, lists merged by the same keys a strategic
//!    merge patch uses ([`super::schema`]) and atomic lists replaced;
//! 3. removes the fields the manager applied last time, left out now, and owned by no one else;
//! 4. records the configuration's field set as the manager's `Apply` entry.
//!
//! Every other write (a create, an update, a patch, of the object or its `status` or `scale`)
//! is recorded too ([`record_update`]), as Kubernetes' field manager records it: the fields
//! it set or changed become its manager's, in an `Update` entry, and leave every other
//! manager's set, so an applier then conflicts with the writer of a field it wants to
//! change; fields it removed are no one's.

use serde_json::{Map, Value, json};

use super::schema::{ListMerge, Schema};

/// An apply that changes fields others own: each field with its owner, described as
/// kube-apiserver describes it ([`owner`]), sorted by owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<(String, String)>);

impl std::fmt::Display for Conflicts {
    /// kube-apiserver's message: one conflict on one line, several grouped by owner.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let [(owner, field)] = self.0.as_slice() {
            return write!(
                f,
                "Apply failed with 1 conflict: conflict with {owner}: {field}"
            );
        }
        write!(f, "Apply failed with {} conflicts: ", self.0.len())?;
        let mut last = None;
        for (i, (owner, field)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            if last != Some(owner) {
                writeln!(f, "conflicts with {owner}:")?;
                last = Some(owner);
            }
            write!(f, "- {field}")?;
        }
        Ok(())
    }
}

/// A managedFields entry's manager as kube-apiserver names it in conflicts:
/// `"kubectl" with subresource "scale" using apps/v1 at 2026-12-07T10:00:00Z`, the
/// subresource and the version and time for the writer of an `Update` only.
fn owner(entry: &Value) -> String {
    let text = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut out = format!("{:?}", text("manager"));
    if !text("subresource").is_empty() {
        out.push_str(&format!(" with subresource {:?}", text("subresource")));
    }
    if text("operation") == "Update" {
        out.push_str(&format!(" using {}", text("apiVersion")));
        if !text("time").is_empty() {
            out.push_str(&format!(" at {}", text("time")));
        }
    }
    out
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Field(String),
    /// The element of a keyed list with these key fields.
    Key(Map<String, Value>),
    /// The element of a set with this value.
    Value(Value),
    /// The element itself (`.`).
    Itself,
}

impl Seg {
    fn tree_key(&self) -> String {
        match self {
            Seg::Field(n) => format!("f:{n}"),
            Seg::Key(k) => format!("k:{}", Value::Object(k.clone())),
            Seg::Value(v) => format!("v:{v}"),
            Seg::Itself => ".".into(),
        }
    }

    fn parse(key: &str) -> Option<Seg> {
        if key == "." {
            return Some(Seg::Itself);
        }
        let (kind, rest) = key.split_at_checked(2)?;
        match kind {
            "f:" => Some(Seg::Field(rest.to_string())),
            "k:" => match serde_json::from_str(rest).ok()? {
                Value::Object(m) => Some(Seg::Key(m)),
                _ => None,
            },
            "v:" => serde_json::from_str(rest).ok().map(Seg::Value),
            _ => None,
        }
    }
}

/// A path as kube-apiserver prints it in conflicts: `.spec.containers[name="c"].image`.
fn display(path: &[Seg]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Seg::Field(n) => {
                out.push('.');
                out.push_str(n);
            }
            Seg::Key(k) => {
                let parts: Vec<String> = k.iter().map(|(n, v)| format!("{n}={v}")).collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            Seg::Value(v) => out.push_str(&format!("[={v}]")),
            Seg::Itself => {}
        }
    }
    out
}

/// Metadata the server owns; never part of a field set.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The field set of an applied configuration, or of an object, as a FieldsV1 tree; its
/// `status` only `with_status` (a write of the status subresource).
fn field_set(schema: &Schema, config: &Value, with_status: bool) -> Value {
    let mut tree = Map::new();
    if let Value::Object(fields) = config {
        for (name, value) in fields {
            if matches!(name.as_str(), "apiVersion" | "kind") || (name == "status" && !with_status)
            {
                continue;
            }
            if name == "metadata" {
                let mut meta = Map::new();
                if let Value::Object(m) = value {
                    for (n, v) in m {
                        if SERVER_METADATA.contains(&n.as_str()) {
                            continue;
                        }
                        meta.insert(
                            Seg::Field(n.clone()).tree_key(),
                            node(schema.field(n).map(|f| (f.list, f.schema)), v),
                        );
                    }
                }
                if !meta.is_empty() {
                    tree.insert("f:metadata".into(), Value::Object(meta));
                }
                continue;
            }
            let field = schema.field(name).map(|f| (f.list, f.schema));
            tree.insert(Seg::Field(name.clone()).tree_key(), node(field, value));
        }
    }
    Value::Object(tree)
}

type FieldSchema = Option<(Option<ListMerge>, Option<&'static Schema>)>;

/// The subtree of one field's value.
fn node(field: FieldSchema, value: &Value) -> Value {
    let (list, schema) = field.unwrap_or((None, None));
    match (value, list) {
        (Value::Array(items), Some(list @ (ListMerge::ByKey(_) | ListMerge::ByKeys(_)))) => {
            let mut t = Map::new();
            for item in items {
                let Some(k) = key_of(item, list) else {
                    continue;
                };
                let mut element = match schema {
                    Some(s) => element_fields(s, item),
                    None => element_fields(&EMPTY, item),
                };
                element.insert(".".into(), json!({}));
                t.insert(Seg::Key(k).tree_key(), Value::Object(element));
            }
            Value::Object(t)
        }
        (Value::Array(items), Some(ListMerge::Union)) => Value::Object(
            items
                .iter()
                .map(|v| (Seg::Value(v.clone()).tree_key(), json!({})))
                .collect(),
        ),
        // An atomic map is one field, owned whole.
        (Value::Object(_), _) if schema.is_some_and(|s| s.atomic) => json!({}),
        (Value::Object(m), _) if !m.is_empty() => {
            Value::Object(element_fields(schema.unwrap_or(&EMPTY), value))
        }
        _ => json!({}),
    }
}

static EMPTY: Schema = Schema::EMPTY;

fn element_fields(schema: &Schema, value: &Value) -> Map<String, Value> {
    let mut t = Map::new();
    if let Value::Object(m) = value {
        for (n, v) in m {
            t.insert(
                Seg::Field(n.clone()).tree_key(),
                node(schema.field(n).map(|f| (f.list, f.schema)), v),
            );
        }
    }
    t
}

/// Every leaf path of a field set.
fn leaves(tree: &Value, prefix: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    let Value::Object(m) = tree else { return };
    for (k, child) in m {
        let Some(seg) = Seg::parse(k) else { continue };
        prefix.push(seg);
        if child.as_object().is_none_or(Map::is_empty) {
            out.push(prefix.clone());
        } else {
            leaves(child, prefix, out);
        }
        prefix.pop();
    }
}

/// Whether a field set has `path` as a member. Membership is exact, as in Kubernetes' field
/// sets: owning a map (`labels: {}`) is not owning its keys, and owning a key is not owning the
/// map.
fn contains(tree: &Value, path: &[Seg]) -> bool {
    let mut node = tree;
    for s in path {
        match node.get(s.tree_key()) {
            Some(n) => node = n,
            None => return false,
        }
    }
    node.as_object().is_none_or(Map::is_empty)
}

/// Removes `path` from a field set, and the subtrees it leaves empty.
fn remove_path(tree: &mut Value, path: &[Seg]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Value::Object(m) = tree else { return };
    let key = first.tree_key();
    if rest.is_empty() {
        m.remove(&key);
        return;
    }
    if let Some(child) = m.get_mut(&key) {
        remove_path(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            m.remove(&key);
        }
    }
}

/// The key of a keyed list's element: its value of each key field; `None` when it lacks one.
fn key_of(item: &Value, list: ListMerge) -> Option<Map<String, Value>> {
    let names: &[&str] = match &list {
        ListMerge::ByKey(key) => std::slice::from_ref(key),
        ListMerge::ByKeys(keys) => keys,
        ListMerge::Union => return None,
    };
    names
        .iter()
        .map(|n| Some((n.to_string(), item.get(n)?.clone())))
        .collect()
}

fn matches_key(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(n, v)| item.get(n) == Some(v))
}

/// The value at `path` in an object.
fn get<'v>(value: &'v Value, path: &[Seg]) -> Option<&'v Value> {
    let mut v = value;
    for s in path {
        v = match s {
            Seg::Field(n) => v.get(n)?,
            Seg::Key(k) => v.as_array()?.iter().find(|i| matches_key(i, k))?,
            Seg::Value(x) => v.as_array()?.iter().find(|i| *i == x)?,
            Seg::Itself => v,
        };
    }
    Some(v)
}

/// Removes the value at `path` from an object (a field, a list element).
fn remove_value(value: &mut Value, path: &[Seg]) {
    let path: Vec<&Seg> = path.iter().filter(|s| **s != Seg::Itself).collect();
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut v = value;
    for s in parents {
        let next = match s {
            Seg::Field(n) => v.get_mut(n.as_str()),
            Seg::Key(k) => v
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| matches_key(i, k))),
            Seg::Value(x) => v
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| *i == x)),
            Seg::Itself => Some(v),
        };
        match next {
            Some(n) => v = n,
            None => return,
        }
    }
    match last {
        Seg::Field(n) => {
            if let Value::Object(m) = v {
                m.remove(n);
            }
        }
        Seg::Key(k) => {
            if let Value::Array(a) = v {
                a.retain(|i| !matches_key(i, k));
            }
        }
        Seg::Value(x) => {
            if let Value::Array(a) = v {
                a.retain(|i| i != x);
            }
        }
        Seg::Itself => {}
    }
}

/// Merges `config` into `target`: maps by field, keyed lists by key, sets by union, the rest
/// replaced.
fn merge(schema: Option<&Schema>, target: &mut Value, config: &Value) {
    let (Value::Object(t), Value::Object(c)) = (&mut *target, config) else {
        *target = config.clone();
        return;
    };
    for (name, value) in c {
        let field = schema.and_then(|s| s.field(name));
        let (list, sub) = field.map_or((None, None), |f| (f.list, f.schema));
        let slot = t.entry(name.clone()).or_insert(Value::Null);
        match (list, &mut *slot, value) {
            (
                Some(list @ (ListMerge::ByKey(_) | ListMerge::ByKeys(_))),
                Value::Array(existing),
                Value::Array(items),
            ) => {
                for item in items {
                    let found = key_of(item, list)
                        .and_then(|k| existing.iter_mut().find(|e| matches_key(e, &k)));
                    match found {
                        Some(e) => merge(sub.or(Some(&EMPTY)), e, item),
                        None => existing.push(item.clone()),
                    }
                }
            }
            (Some(ListMerge::Union), Value::Array(existing), Value::Array(items)) => {
                for item in items {
                    if !existing.contains(item) {
                        existing.push(item.clone());
                    }
                }
            }
            (_, Value::Object(_), Value::Object(_)) if !sub.is_some_and(|s| s.atomic) => {
                let sub = if name == "metadata" { schema } else { sub };
                merge(sub.or(Some(&EMPTY)), slot, value);
            }
            _ => *slot = value.clone(),
        }
    }
}

/// The managedFields entries of an object.
fn managed_fields(object: &Value) -> Vec<Value> {
    object["metadata"]
        .get("managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Adds `path` to a field set (a leaf, unless the set holds fields under it already).
fn insert_path(tree: &mut Value, path: &[Seg]) {
    let mut node = tree;
    for s in path {
        let Value::Object(m) = node else { return };
        node = m.entry(s.tree_key()).or_insert_with(|| json!({}));
    }
}

/// Whether the write that turned `before` into `after` set or changed the field at `path`
/// of `after`'s field set: a value, or the presence of a list element (`.`).
fn changed_at(before: &Value, after: &Value, path: &[Seg]) -> bool {
    if matches!(path.last(), Some(Seg::Itself)) {
        get(before, path).is_none()
    } else {
        get(before, path) != get(after, path)
    }
}

/// A write other than an apply, as [`record_update`] records it.
#[derive(Debug, Clone, Copy)]
pub struct Update<'a> {
    /// The writer's field manager (`fieldManager`, or its User-Agent's product).
    pub manager: &'a str,
    /// `status` or `scale` for a write of that subresource; none for the object itself.
    pub subresource: Option<&'a str>,
    /// When, as the entry records it.
    pub time: &'a str,
}

impl Update<'_> {
    /// Whether `entry` is this writer's: its manager, operation, API version and
    /// subresource.
    fn owns(&self, entry: &Value, api_version: &Value) -> bool {
        entry.get("manager").and_then(Value::as_str) == Some(self.manager)
            && entry.get("operation").and_then(Value::as_str) == Some("Update")
            && entry.get("apiVersion") == Some(api_version)
            && entry.get("subresource").and_then(Value::as_str) == self.subresource
    }
}

/// The `managedFields` entries after a write other than an apply turned `before` (none on
/// create) into `after`, whose own entries it starts from. Every field the write set or
/// changed becomes the writer's, in its `Update` entry, and leaves every other manager's
/// set (an appliers' included: updates take fields over, they never conflict); every field
/// it removed leaves every set; entries left owning nothing go. Without it an applier would
/// go on owning, and conflicting over, a field another client removed (leader election
/// releases a Lease with a patch that removes its holder, then the next candidate applies).
pub(super) fn record_update(
    schema: &Schema,
    before: Option<&Value>,
    after: &Value,
    update: &Update,
) -> Vec<Value> {
    // A subresource's write may change status (`status`, a CSR's `approval`); the object's
    // own write leaves it as it was.
    let with_status = update.subresource.is_some();
    let none = json!({});
    let before = before.unwrap_or(&none);
    let now_set = field_set(schema, after, with_status);
    let mut set = Vec::new();
    leaves(&now_set, &mut Vec::new(), &mut set);
    set.retain(|path| changed_at(before, after, path));
    let mut removed = Vec::new();
    leaves(
        &field_set(schema, before, with_status),
        &mut Vec::new(),
        &mut removed,
    );
    removed.retain(|path| !contains(&now_set, path));

    let api_version = after.get("apiVersion").cloned().unwrap_or(json!("v1"));
    let mut entries = managed_fields(after);
    let mine = entries.iter().position(|e| update.owns(e, &api_version));
    for (i, e) in entries.iter_mut().enumerate() {
        let Some(fields) = e.get_mut("fieldsV1") else {
            continue;
        };
        for path in &removed {
            remove_path(fields, path);
        }
        if Some(i) != mine {
            for path in &set {
                remove_path(fields, path);
            }
        }
    }
    if !set.is_empty() {
        let mut entry = match mine {
            Some(i) => entries.remove(i),
            None => {
                let mut e = json!({
                    "manager": update.manager,
                    "operation": "Update",
                    "apiVersion": api_version,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {},
                });
                if let Some(sub) = update.subresource {
                    e["subresource"] = json!(sub);
                }
                e
            }
        };
        for path in &set {
            insert_path(&mut entry["fieldsV1"], path);
        }
        entry["time"] = json!(update.time);
        entries.push(entry);
    }
    entries.retain(|e| {
        e.get("fieldsV1")
            .and_then(Value::as_object)
            .is_some_and(|f| !f.is_empty())
    });
    entries
}

fn is_apply_of(entry: &Value, manager: &str) -> bool {
    entry.get("manager").and_then(Value::as_str) == Some(manager)
        && entry.get("operation").and_then(Value::as_str) == Some("Apply")
}

/// Applies `config` for `manager` to `current` (the stored object, or `None` when the apply
/// creates it). `now` is the time recorded in the manager's entry.
pub(super) fn server_side_apply(
    schema: &Schema,
    current: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, Conflicts> {
    let applied = field_set(schema, config, false);
    let mut applied_leaves = Vec::new();
    leaves(&applied, &mut Vec::new(), &mut applied_leaves);
    let base = current.cloned().unwrap_or_else(|| json!({}));
    let mut entries = managed_fields(&base);
    let previous = entries
        .iter()
        .find(|e| is_apply_of(e, manager))
        .and_then(|e| e.get("fieldsV1").cloned())
        .unwrap_or_else(|| json!({}));

    // 1. Conflicts: a field another manager owns, set to a value it does not have now.
    let mut conflicts = Vec::new();
    for path in &applied_leaves {
        let differs = get(&base, path) != get(config, path);
        for e in &mut entries {
            let owner = owner(e);
            if is_apply_of(e, manager) {
                continue;
            }
            let Some(fields) = e.get_mut("fieldsV1") else {
                continue;
            };
            if !contains(fields, path) {
                continue;
            }
            if force {
                remove_path(fields, path);
            } else if differs && !matches!(path.last(), Some(Seg::Itself)) {
                conflicts.push((owner, display(path)));
            }
        }
    }
    if !conflicts.is_empty() {
        conflicts.sort();
        conflicts.dedup();
        return Err(Conflicts(conflicts));
    }

    // 2. Merge; 3. drop what this manager applied before, left out now, owned by no one else.
    let mut result = base.clone();
    let mut config_body = config.clone();
    if let Value::Object(m) = &mut config_body {
        m.remove("status");
    }
    merge(Some(schema), &mut result, &config_body);
    let mut before = Vec::new();
    leaves(&previous, &mut Vec::new(), &mut before);
    for path in before {
        if contains(&applied, &path) {
            continue;
        }
        let owned_by_others = entries
            .iter()
            .filter(|e| !is_apply_of(e, manager))
            .any(|e| e.get("fieldsV1").is_some_and(|f| contains(f, &path)));
        if !owned_by_others {
            remove_value(&mut result, &path);
        }
    }

    // 4. Record the manager's field set.
    entries.retain(|e| {
        !is_apply_of(e, manager)
            && e.get("fieldsV1")
                .and_then(Value::as_object)
                .is_some_and(|f| !f.is_empty())
    });
    entries.push(json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": config.get("apiVersion").cloned().unwrap_or(json!("v1")),
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": applied,
    }));
    if !result.get("metadata").is_some_and(Value::is_object) {
        result["metadata"] = json!({});
    }
    result["metadata"]["managedFields"] = Value::Array(entries);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::super::schema;
    use super::*;
    use skiff_proto::api::Kind;

    fn pod(image: &str, labels: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": image}]}
        })
    }

    fn apply(
        current: Option<&Value>,
        config: &Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, Conflicts> {
        server_side_apply(
            schema::for_kind(Kind::Pod),
            current,
            config,
            manager,
            force,
            "2026-01-01T00:00:00Z",
        )
    }

    /// The field set names keyed list elements by their merge key, as FieldsV1 does.
    #[test]
    fn field_sets_are_kubernetes_fields_v1() {
        let set = field_set(
            schema::for_kind(Kind::Pod),
            &pod("nginx", json!({"app": "web"})),
            false,
        );
        assert_eq!(
            set,
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {
                    ".": {}, "f:name": {}, "f:image": {}
                }}}
            })
        );
    }

    const T1: &str = "2026-12-07T10:00:00Z";

    fn update(before: Option<&Value>, after: &Value, manager: &str, sub: Option<&str>) -> Value {
        let mut out = after.clone();
        let entries = record_update(
            schema::for_kind(Kind::Pod),
            before,
            after,
            &Update {
                manager,
                subresource: sub,
                time: T1,
            },
        );
        out["metadata"]["managedFields"] = Value::Array(entries);
        out
    }

    /// A patch that removes or changes applied fields takes them from their manager: the
    /// removed ones are no one's, the changed ones its writer's, so another applier
    /// conflicts with the writer, not the first applier; fields it left alone stay owned.
    #[test]
    fn a_write_takes_the_fields_it_changes_from_their_manager() {
        let first = apply(
            None,
            &pod("nginx", json!({"app": "web", "tier": "a"})),
            "alice",
            false,
        )
        .unwrap();
        let mut patched = first.clone();
        patched["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("app");
        patched["metadata"]["labels"]["tier"] = json!("b");
        let patched = update(Some(&first), &patched, "carol", None);
        let entries = patched["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2, "{entries:?}");
        let alice = &entries[0]["fieldsV1"];
        assert!(alice.get("f:metadata").is_none(), "{alice}");
        assert!(alice["f:spec"]["f:containers"].is_object(), "{alice}");
        assert_eq!(entries[1]["manager"], "carol");
        assert_eq!(entries[1]["operation"], "Update");
        assert_eq!(entries[1]["time"], T1);
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:tier": {}}}})
        );
        let e = apply(
            Some(&patched),
            &pod("nginx", json!({"app": "api", "tier": "c"})),
            "bob",
            false,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Apply failed with 1 conflict: conflict with \"carol\" using v1 at 2026-12-07T10:00:00Z: .metadata.labels.tier"
        );
        apply(
            Some(&patched),
            &pod("nginx", json!({"app": "api"})),
            "bob",
            false,
        )
        .expect("no one owns the removed label");
        // A write that changes nothing leaves the entries as they were.
        let same = update(Some(&first), &first, "carol", None);
        assert_eq!(
            same["metadata"]["managedFields"],
            first["metadata"]["managedFields"]
        );
    }

    /// A create makes its writer the owner of every field it set, status aside; a status
    /// write records only what it changed, under the `status` subresource.
    #[test]
    fn creates_and_status_writes_are_recorded_apart() {
        let mut created = pod("nginx", json!({"app": "web"}));
        created["status"] = json!({"phase": "Pending"});
        let created = update(None, &created, "kubectl-create", None);
        let entries = created["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 1);
        let fields = &entries[0]["fieldsV1"];
        assert!(fields.get("f:status").is_none(), "{fields}");
        assert_eq!(
            fields["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"],
            json!({".": {}, "f:name": {}, "f:image": {}})
        );
        assert!(entries[0].get("subresource").is_none());
        let mut running = created.clone();
        running["status"] = json!({"phase": "Running", "podIP": "10.0.0.2"});
        let running = update(Some(&created), &running, "skiff-node", Some("status"));
        let entries = running["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0], created["metadata"]["managedFields"][0]);
        assert_eq!(entries[1]["subresource"], "status");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:status": {"f:phase": {}, "f:podIP": {}}})
        );
    }

    #[test]
    fn several_conflicts_are_grouped_by_owner() {
        let c = Conflicts(vec![
            ("\"alice\"".into(), ".a".into()),
            ("\"alice\"".into(), ".b".into()),
            ("\"bob\" using v1 at T".into(), ".c".into()),
        ]);
        assert_eq!(
            c.to_string(),
            "Apply failed with 3 conflicts: conflicts with \"alice\":\n- .a\n- .b\n\
             conflicts with \"bob\" using v1 at T:\n- .c"
        );
        let scale = json!({"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1",
            "time": "T", "subresource": "scale"});
        assert_eq!(
            owner(&scale),
            "\"kubectl\" with subresource \"scale\" using apps/v1 at T"
        );
    }

    /// A second manager changing a field the first applied conflicts, naming both; the same
    /// value is shared without conflict; force takes the field over.
    #[test]
    fn conflicts_and_force() {
        let first = apply(None, &pod("nginx", json!({"app": "web"})), "alice", false).unwrap();
        let e = apply(
            Some(&first),
            &pod("nginx:2", json!({"app": "web"})),
            "bob",
            false,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Apply failed with 1 conflict: conflict with \"alice\": .spec.containers[name=\"c\"].image"
        );
        let shared = apply(
            Some(&first),
            &pod("nginx", json!({"app": "web"})),
            "bob",
            false,
        )
        .expect("same values share ownership");
        assert_eq!(
            shared["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let forced = apply(
            Some(&first),
            &pod("nginx:2", json!({"app": "web"})),
            "bob",
            true,
        )
        .unwrap();
        assert_eq!(forced["spec"]["containers"][0]["image"], "nginx:2");
        // alice no longer owns the image: she may not silently take it back either.
        let e = apply(
            Some(&forced),
            &pod("nginx", json!({"app": "web"})),
            "alice",
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("conflict with \"bob\""), "{e}");
    }

    /// A field the manager applied before and leaves out now is removed, unless another
    /// manager owns it; fields nobody applied (set by others' writes) stay.
    #[test]
    fn left_out_fields_are_removed() {
        let mut first = apply(
            None,
            &pod("nginx", json!({"app": "web", "tier": "front"})),
            "alice",
            false,
        )
        .unwrap();
        first["metadata"]["annotations"] = json!({"note": "by hand"});
        let second = apply(
            Some(&first),
            &pod("nginx", json!({"app": "web"})),
            "alice",
            false,
        )
        .unwrap();
        assert_eq!(second["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(second["metadata"]["annotations"]["note"], "by hand");
    }

    /// Owning a map is not owning its keys: a forced `labels: {}` takes none of them.
    #[test]
    fn membership_is_exact() {
        let first = apply(
            None,
            &pod("nginx", json!({"app": "web", "tier": "t"})),
            "alice",
            false,
        )
        .unwrap();
        let forced = apply(Some(&first), &pod("nginx:2", json!({})), "bob", true).unwrap();
        let second = apply(
            Some(&forced),
            &pod("nginx:2", json!({"app": "web"})),
            "alice",
            true,
        )
        .unwrap();
        assert_eq!(second["metadata"]["labels"], json!({"app": "web"}));
    }

    /// Containers merge by name: a second manager adding its own container keeps the first's.
    #[test]
    fn keyed_lists_merge() {
        let first = apply(None, &pod("nginx", json!({})), "alice", false).unwrap();
        let sidecar = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "log", "image": "busybox"}]}
        });
        let both = apply(Some(&first), &sidecar, "bob", false).unwrap();
        let names: Vec<&str> = both["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["c", "log"]);
    }

    /// A custom kind's lists merge as its CRD's schema says: a list map by all its keys, a
    /// set by value; an atomic list stays its applier's, so another's change conflicts.
    #[test]
    fn custom_kinds_merge_lists_as_their_schema_says() {
        let crd: skiff_proto::api::GenericObject = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.ssa.example.com"},
            "spec": {"group": "ssa.example.com", "scope": "Namespaced",
                     "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                            "type": "object", "properties": {
                                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                                          "x-kubernetes-list-map-keys": ["port", "protocol"],
                                          "items": {"type": "object", "properties": {
                                              "port": {"type": "integer"}, "protocol": {"type": "string"},
                                              "name": {"type": "string"}}}},
                                "tags": {"type": "array", "x-kubernetes-list-type": "set",
                                         "items": {"type": "string"}},
                                "args": {"type": "array", "items": {"type": "string"}},
                                "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                                             "additionalProperties": {"type": "string"}}}}}}}}]}
        }))
        .unwrap();
        let kind = Kind::Generic(skiff_proto::api::custom::define(&crd)[0]);
        let gadget = |spec: Value| {
            json!({"apiVersion": "ssa.example.com/v1", "kind": "Gadget",
                   "metadata": {"name": "g"}, "spec": spec})
        };
        let apply = |current: Option<&Value>, spec: Value, manager: &str| {
            server_side_apply(
                schema::for_kind(kind),
                current,
                &gadget(spec),
                manager,
                false,
                "2026-01-01T00:00:00Z",
            )
        };
        let first = apply(
            None,
            json!({"ports": [{"port": 80, "protocol": "TCP", "name": "web"}],
                   "tags": ["a"], "args": ["1"]}),
            "alice",
        )
        .unwrap();
        let set = &first["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"];
        assert!(
            set["f:ports"]
                .get("k:{\"port\":80,\"protocol\":\"TCP\"}")
                .is_some(),
            "{set}"
        );
        let both = apply(
            Some(&first),
            json!({"ports": [{"port": 80, "protocol": "UDP"}], "tags": ["b"]}),
            "bob",
        )
        .unwrap();
        assert_eq!(
            both["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP", "name": "web"}, {"port": 80, "protocol": "UDP"}])
        );
        assert_eq!(both["spec"]["tags"], json!(["a", "b"]));
        let conflict = apply(Some(&both), json!({"args": ["2"]}), "bob").unwrap_err();
        assert_eq!(
            conflict.to_string(),
            "Apply failed with 1 conflict: conflict with \"alice\": .spec.args"
        );
        // An atomic map is owned whole and replaced: alice's new selector drops her old key,
        // and bob's differing one conflicts with hers as one field.
        let selected = apply(
            Some(&both),
            json!({"selector": {"app": "a", "tier": "web"}}),
            "alice",
        )
        .unwrap();
        let alice = selected["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == "alice")
            .map(|e| &e["fieldsV1"]["f:spec"])
            .unwrap();
        assert_eq!(alice["f:selector"], json!({}), "{alice}");
        let narrowed = apply(Some(&selected), json!({"selector": {"app": "b"}}), "alice").unwrap();
        assert_eq!(narrowed["spec"]["selector"], json!({"app": "b"}));
        let conflict =
            apply(Some(&narrowed), json!({"selector": {"app": "c"}}), "bob").unwrap_err();
        assert!(
            conflict.to_string().contains(".spec.selector"),
            "{conflict}"
        );
    }
}
