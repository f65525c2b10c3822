"""DuckDB SQL (the one definition of every view and analyzer query) transpiled to ClickHouse SQL.

The analyzers and tracer/storage/views.py write DuckDB SQL. To run the same queries inside ClickHouse, each
statement is parsed with ``sqlglot`` (DuckDB dialect), a few constructs sqlglot does not translate — or
translates with another meaning — are rewritten on the syntax tree here, and ClickHouse SQL is generated.
Nothing is kept as a second hand-written copy: a view or query changed in DuckDB SQL changes here too.

What the rewrites keep equal (DuckDB semantics, spelt in ClickHouse):

- ``[TRY(]json_transform(attributes, '{"k": "BIGINT", ...}')[)] AS v`` and ``v."k"``: one ``JSONExtract`` into
  a named tuple (one JSON parse per row, as in DuckDB), read with ``tupleElement``; a key typed ``JSON``
  keeps its raw JSON text (``JSONExtractRaw``), as DuckDB's JSON type does.
- ``json_extract_string`` / ``->>``: the text of any value (ClickHouse's JSONExtractString gives '' for a
  number or a list), NULL for a missing key or a JSON null; ``[*]`` gives the list of texts.
- ``json_type`` names (ARRAY, VARCHAR, BIGINT, ...), ``CAST(x AS JSON)`` (JSON text stays text).
- ``least``/``greatest`` skip NULLs, ``//`` is exact integer division, ``median``/``quantile_cont`` interpolate exactly,
  ``list(x ORDER BY y)``, list slices ``[i:j]``, ``split_part``, ``mode``, ``histogram``, ``bool_or``/``bool_and``,
  ``UNION ALL BY NAME`` (columns matched by name), ``MATERIALIZED`` CTEs, temporary tables (Memory tables),
  and ``?`` parameters (bound as literals: ClickHouse's HTTP and in-process paths have no ``?``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

import sqlglot
from sqlglot import exp

# DuckDB json_transform types -> ClickHouse types inside the JSONExtract tuple
_CH_TYPES = {"VARCHAR": "String", "BIGINT": "Int64", "INTEGER": "Int64", "UBIGINT": "UInt64",
             "DOUBLE": "Float64", "FLOAT": "Float64", "BOOLEAN": "Bool", "VARCHAR[]": "Array(Nullable(String))"}
# ClickHouse JSONType names -> DuckDB json_type names
_JSON_TYPE_NAMES = {"Array": "ARRAY", "Object": "OBJECT", "String": "VARCHAR", "Int64": "BIGINT",
                    "UInt64": "UBIGINT", "Double": "DOUBLE", "Bool": "BOOLEAN", "Null": "NULL"}


class TranspileError(ValueError):
    """A DuckDB statement that has no ClickHouse form here (the message names the construct)."""


def _ch(sql: str) -> exp.Expr:
    return sqlglot.parse_one(sql, read="clickhouse")


def _sql(node: exp.Expr) -> str:
    return node.sql(dialect="clickhouse")


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _path_args(path: exp.Expr) -> tuple[list[str], bool] | None:
    """A DuckDB JSON path as ClickHouse JSON-function path arguments (keys quoted, indices 1-based), and
    whether it ends in ``[*]``; None for a path this does not handle."""
    if not isinstance(path, exp.JSONPath):
        return None
    args: list[str] = []
    wildcard = False
    for part in path.expressions:
        if isinstance(part, exp.JSONPathRoot):
            continue
        if isinstance(part, exp.JSONPathKey) and isinstance(part.this, str):
            args.append(_quote(part.this))
        elif isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, int):
            args.append(str(part.this + 1))
        elif isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, exp.JSONPathWildcard):
            wildcard = True
        else:
            return None
    return args, wildcard


def _json_path(path: exp.Expr) -> exp.Expr:
    """A JSON path given as a string literal (a function argument) as sqlglot's parsed path."""
    if isinstance(path, exp.Literal) and path.is_string:
        parsed = sqlglot.parse_one(f"SELECT x -> {_quote(path.this)}", read="duckdb").expressions[0]
        return parsed.expression if isinstance(parsed, exp.JSONExtract) else path
    return path


def json_text_sql(doc: str, args: Sequence[str], array: bool = False) -> str:
    """ClickHouse SQL for DuckDB's ``json_extract_string(doc, path)``: a string's text, any other value's JSON
    text, NULL for a missing key or JSON null (JSONExtract into Nullable(String) does exactly that, in one
    parse); ``array``: the list of texts of ``path[*]``."""
    at = "".join(", " + a for a in args)
    return f"JSONExtract({doc}{at}, '{'Array(Nullable(String))' if array else 'Nullable(String)'}')"


def _json_text(node: exp.JSONExtractScalar) -> exp.Expr:
    parsed = _path_args(node.expression)
    if parsed is None:
        raise TranspileError(f"JSON path {node.expression.sql()} has no ClickHouse form here")
    args, wildcard = parsed
    return _ch(json_text_sql(_sql(node.this), args, array=wildcard))


def _transform_tuple(call: exp.Anonymous) -> tuple[exp.Expr, dict[str, str], str]:
    """``json_transform(doc, spec)``: the JSONExtract tuple, the spec's key -> DuckDB type, and doc's SQL."""
    doc, spec_lit = call.expressions
    spec = json.loads(spec_lit.this)
    fields = ", ".join(f"`{k.replace('`', '``')}` Nullable({_CH_TYPES[t]})" if not t.endswith("[]")
                       else f"`{k.replace('`', '``')}` {_CH_TYPES[t]}"
                       for k, t in spec.items() if t != "JSON")
    tuple_sql = f"JSONExtract({_sql(doc)}, {_quote(f'Tuple({fields})')})" if fields else "tuple()"
    return _ch(tuple_sql), spec, _sql(doc)


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return "'" + str(value).replace("'", "''") + "'"


def bind(sql: str, params: Sequence[object] | None) -> str:
    """DuckDB SQL with each ``?`` outside string literals replaced by its parameter as a DuckDB literal."""
    if not params:
        return sql
    values = iter(params)
    parts = re.split(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")", sql)
    for i in range(0, len(parts), 2):
        def sub(_m: re.Match[str]) -> str:
            try:
                return _literal(next(values))
            except StopIteration:
                raise TranspileError("fewer parameters than ? in the statement") from None
        parts[i] = re.sub(r"\?", sub, parts[i])
    return "".join(parts)


def _aggregate(node: exp.Expr) -> tuple[exp.Expr, str] | None:
    """An aggregate that needs a ClickHouse spelling: (the core aggregate, a wrapper around it with ``{}``).
    The wrapper stays outside a FILTER clause, so ``mode(x) FILTER (WHERE c)`` keeps its filter on topK."""
    if isinstance(node, exp.ArrayAgg):
        inner = node.this
        if isinstance(inner, exp.Order):
            keys = inner.expressions
            value = _sql(inner.this)
            key = keys[0]
            order = _sql(key.this)
            sort = "arrayReverseSort" if key.args.get("desc") else "arraySort"
            return _ch(f"groupArray(({order}, {value}))"), f"arrayMap(_t -> _t.2, {sort}(_t -> _t.1, {{}}))"
        return _ch(f"groupArray({_sql(inner)})"), "{}"
    if isinstance(node, exp.Mode):
        return _ch(f"topK(1)({_sql(node.this)})"), "arrayElement({}, 1)"
    if isinstance(node, exp.Median):
        return _ch(f"quantileExactInclusive(0.5)({_sql(node.this)})"), "{}"
    if isinstance(node, (exp.PercentileCont, exp.Quantile)) or (
            isinstance(node, exp.Anonymous) and node.name.lower() == "quantile_cont"):
        args = [node.this, node.expression] if not isinstance(node, exp.Anonymous) else node.expressions
        return _ch(f"quantileExactInclusive({_sql(args[1])})({_sql(args[0])})"), "{}"
    if isinstance(node, exp.Anonymous) and node.name.lower() == "histogram":
        v = _sql(node.expressions[0])
        return _ch(f"sumMapIf(map(assumeNotNull({v}), toUInt64(1)), {v} IS NOT NULL)"), "{}"
    if isinstance(node, exp.LogicalOr):
        return _ch(f"max({_sql(node.this)})"), "{}"
    if isinstance(node, exp.LogicalAnd):
        return _ch(f"min({_sql(node.this)})"), "{}"
    return None


def _if_combinator(agg: exp.Expr, cond: exp.Expr) -> exp.Expr:
    """``agg(args) FILTER (WHERE cond)`` as ClickHouse's ``aggIf(args, cond)`` (parametric ones too)."""
    text, c = _sql(agg), _sql(cond)
    if text.endswith(" IGNORE NULLS"):  # any() skips NULLs in ClickHouse already
        text = text[: -len(" IGNORE NULLS")]
    m = re.fullmatch(r"(\w+)(\([^()]*\))?\((.*)\)", text, re.DOTALL)
    if m is None:
        raise TranspileError(f"FILTER over {text[:80]} has no ClickHouse form here")
    name, params, args = m.group(1), m.group(2) or "", m.group(3).strip()
    if name.lower() == "count":
        if args == "*" or not args:
            return _ch(f"toInt64(countIf({c}))")
        if args.upper().startswith("DISTINCT "):
            return _ch(f"toInt64(uniqExactIf({args[9:]}, {c}))")
        return _ch(f"toInt64(countIf({args}, {c}))")
    return _ch(f"{name}If{params}({args}, {c})")


def _wrap(core: exp.Expr, wrapper: str) -> exp.Expr:
    if wrapper == "{}":
        return core
    return _ch(wrapper.replace("{}", "__CORE__")).transform(
        lambda n: core.copy() if isinstance(n, exp.Column) and n.name == "__CORE__" else n)


def _rewrite(tree: exp.Expr) -> exp.Expr:
    transforms: dict[str, tuple[dict[str, str], str]] = {}  # json_transform alias -> (spec, doc SQL)
    joined: list[exp.Join] = []  # joined subqueries given a name

    def pre(node: exp.Expr) -> exp.Expr:
        # json_transform first, so the columns that read its alias know the spec
        call = node.this.this if isinstance(node, exp.Alias) and isinstance(node.this, exp.Try) else (
            node.this if isinstance(node, exp.Alias) else None)  # TRY(json_transform(...)) or a bare one
        if isinstance(call, exp.Anonymous) and call.name.lower() == "json_transform":
            tup, spec, doc = _transform_tuple(call)
            transforms[node.alias] = (spec, doc)
            return exp.alias_(tup, node.alias)
        return node

    tree = tree.transform(pre)

    def post(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and node.table in transforms and isinstance(node.this, exp.Identifier):
            spec, doc = transforms[node.table]
            key = node.name
            if spec.get(key) == "JSON":
                return _ch(f"nullIf(JSONExtractRaw({doc}, {_quote(key)}), '')")
            return _ch(f"tupleElement({node.table}, {_quote(key)})")
        if isinstance(node, exp.Try):
            return node.this
        if isinstance(node, exp.JSONExtractScalar):
            return _json_text(node)
        if isinstance(node, exp.JSONExtract) and isinstance(node.expression, exp.JSONPath):
            parsed = _path_args(node.expression)  # json_extract / ->: the raw JSON, NULL when missing
            if parsed is None or parsed[1]:
                raise TranspileError(f"JSON path {node.expression.sql()} has no ClickHouse form here")
            at = "".join(", " + a for a in parsed[0])
            return _ch(f"nullIf(JSONExtractRaw({_sql(node.this)}{at}), '')")
        if isinstance(node, exp.JSONType):
            src = ", ".join(f"'{a}'" for a in _JSON_TYPE_NAMES)
            dst = ", ".join(f"'{b}'" for b in _JSON_TYPE_NAMES.values())
            x = _sql(node.this)
            return _ch(f"if(({x}) IS NULL, NULL, transform(toString(JSONType({x})), [{src}], [{dst}], 'NULL'))")
        if isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.JSON:
            return node.this
        if isinstance(node, (exp.Least, exp.Greatest)):
            fn = "least" if isinstance(node, exp.Least) else "greatest"
            args = [node.this, *node.expressions]
            if any(_floaty(x) for x in args):
                # DuckDB's least(BIGINT, DOUBLE) is a DOUBLE; ClickHouse has no supertype of Int64 and Float64
                args = [_ch(f"toFloat64({_sql(x)})") for x in args]
            acc = _sql(args[0])
            for a in args[1:]:
                b = _sql(a)
                acc = f"if(({acc}) IS NULL, {b}, if(({b}) IS NULL, {acc}, {fn}({acc}, {b})))"
            return _ch(acc)
        if isinstance(node, exp.IntDiv):  # DuckDB's //: exact on BIGINT (a float division loses ns digits)
            a, b = _sql(node.this), _sql(node.expression)
            return _ch(f"if(({b}) = 0, NULL, intDiv({a}, {b}))")
        if isinstance(node, exp.Filter) and isinstance(node.this, exp.Anonymous) and node.this.name.lower() == "histogram":
            v, c = _sql(node.this.expressions[0]), _sql(node.expression.this)
            return _ch(f"sumMapIf(map(assumeNotNull({v}), toUInt64(1)), ({v}) IS NOT NULL AND ({c}))")
        if isinstance(node, exp.Filter):
            agg = _aggregate(node.this)
            core, wrapper = agg if agg is not None else (node.this, "{}")
            return _wrap(_if_combinator(core, node.expression.this), wrapper)
        if isinstance(node, exp.Count) and not isinstance(node.parent, (exp.Filter, exp.Window)):
            return _ch(f"toInt64({_sql(node)})")  # DuckDB's count is BIGINT; UInt64 has no supertype with Int64
        if isinstance(node, exp.Window) and isinstance(node.this, exp.Count):
            return _ch(f"toInt64({_sql(node)})")  # count(*) OVER (): the window's result converted, not count's
        if not isinstance(node.parent, exp.Filter):
            agg = _aggregate(node)
            if agg is not None:
                return _wrap(*agg)
        if isinstance(node, exp.Bracket) and len(node.expressions) == 1 and isinstance(node.expressions[0], exp.Slice):
            sl = node.expressions[0]
            lo, hi = _sql(sl.this), _sql(sl.expression)
            return _ch(f"arraySlice({_sql(node.this)}, {lo}, ({hi}) - ({lo}) + 1)")
        if isinstance(node, exp.Anonymous) and node.name.lower() == "hash" and len(node.expressions) == 1:
            # DuckDB's hash (a UBIGINT a sample is ordered by): another 64-bit hash, so another sample of the
            # same size
            return _ch(f"xxHash64({_sql(node.expressions[0])})")
        if isinstance(node, exp.Anonymous) and node.name.lower() == "json_exists" and len(node.expressions) == 2:
            doc, path = node.expressions
            parsed = _path_args(_json_path(path))
            if parsed is None or parsed[1]:
                raise TranspileError(f"json_exists path {path.sql()} has no ClickHouse form here")
            return _ch(f"JSONHas({_sql(doc)}{''.join(', ' + a for a in parsed[0])})")
        if isinstance(node, exp.Length):  # DuckDB's length is a BIGINT; UInt64 has no supertype with Int64
            return _ch(f"toInt64(length({_sql(node.this)}))")
        if isinstance(node, exp.SplitPart):
            # DuckDB's split_part(s, sep, n): 1-based, negative from the end, '' out of range (arrayElement's
            # default too), NULL for NULL; splitByString takes no Nullable, so the NULL is kept outside it
            s, sep, n = (_sql(node.args[k]) for k in ("this", "delimiter", "part_index"))
            return _ch(f"if(({s}) IS NULL, NULL, arrayElement(splitByString({sep}, assumeNotNull({s})), {n}))")
        if isinstance(node, exp.Select):
            # ClickHouse names a projected `r.x` "r.x"; DuckDB names it x
            node.set("expressions", [exp.alias_(e, e.name) if isinstance(e, exp.Column) and e.table
                                     and not isinstance(e.this, exp.Star) else e for e in node.expressions])
            for j in node.args.get("joins") or []:
                _asof_key(node, j)
            _order_by_alias(node)
        if isinstance(node, exp.Join) and isinstance(node.this, exp.Subquery) and not node.this.alias:
            # ClickHouse wants a name for a joined subquery (DuckDB needs none)
            node.set("this", exp.alias_(node.this, f"_joined_{len(joined)}", table=True))
            joined.append(node)
        if isinstance(node, exp.CTE):
            node.set("materialized", None)
        if isinstance(node, exp.Union) and node.args.get("by_name"):
            return _union_by_name(node)
        return node

    return _postorder(tree, post)


def _order_by_alias(select: exp.Select) -> None:
    """DuckDB's ORDER BY binds a bare name to the select list's alias first (``sum(wasted) AS wasted ...
    ORDER BY wasted`` orders by the sum); under prefer_column_name_to_alias (which WHERE and the aggregates
    need, clickhouse.py) ClickHouse binds it to the source column, an error in a GROUP BY query and another
    order elsewhere. Such a name is replaced by the aliased expression itself."""
    order = select.args.get("order")
    if order is None:
        return
    aliased = {e.alias: e.this for e in select.expressions if isinstance(e, exp.Alias)}
    for item in order.expressions:
        key = item.this if isinstance(item, exp.Ordered) else None
        if not isinstance(key, exp.Column) or key.table or key.name not in aliased:
            continue
        target = aliased[key.name]
        if isinstance(target, exp.Column) and target.name == key.name:
            continue  # `t.x AS x`: the same column either way
        item.set("this", target.copy())


def _floaty(node: exp.Expr) -> bool:
    """Whether an expression is a DOUBLE in DuckDB by its look: a decimal or exponent literal, a division,
    or a toFloat64 already made by a rewrite below it."""
    for n in node.walk():
        if isinstance(n, exp.Literal) and not n.is_string and any(c in n.this for c in ".eE"):
            return True
        if isinstance(n, exp.Div) or (isinstance(n, exp.Anonymous) and n.name.lower() == "tofloat64"):
            return True
    return False


def _postorder(node: exp.Expr, fn: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """Children first, then the node: a rewrite sees its arguments already in ClickHouse form."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, _postorder(value, fn))
        elif isinstance(value, list):
            node.set(key, [_postorder(v, fn) if isinstance(v, exp.Expression) else v for v in value])
    return fn(node)


def _asof_key(select: exp.Select, join: exp.Join) -> None:
    """ClickHouse's ASOF JOIN needs an equality besides the inequality; DuckDB's may have none. Both sides
    get a constant key column to join on (the match stays the nearest row by the inequality)."""
    on = join.args.get("on")
    if join.args.get("method", "").upper() != "ASOF" or on is None or any(on.find_all(exp.EQ)):
        return
    right = join.this
    left = select.args["from_"].this
    if not isinstance(right, exp.Table) or not isinstance(left, exp.Table):
        raise TranspileError("ASOF JOIN without an equality over something other than two tables")
    for side, holder, key in ((left, select.args["from_"], "this"), (right, join, "this")):
        name = side.alias_or_name
        holder.set(key, exp.alias_(exp.Subquery(this=_ch(f"SELECT *, 0 AS _asof FROM {side.name}")), name,
                                   table=True))
    join.set("on", _ch(f"{left.alias_or_name}._asof = {right.alias_or_name}._asof AND ({_sql(on)})"))


def _union_by_name(node: exp.Union) -> exp.Expr:
    left, right = node.this, node.expression
    if not isinstance(left, exp.Select) or not isinstance(right, exp.Select):
        raise TranspileError("UNION BY NAME over something other than two SELECTs")
    names = [e.alias_or_name for e in left.expressions]
    by_name = {e.alias_or_name: e for e in right.expressions}
    if "*" in names or "*" in by_name:
        raise TranspileError("UNION BY NAME over SELECT * (the columns must be named)")
    cols = [by_name.get(n, exp.alias_(exp.Null(), n)) for n in names]
    right = right.copy()
    right.set("expressions", cols)
    out = exp.Union(this=left, expression=right, distinct=node.args.get("distinct"))
    tail = {k: node.args[k] for k in ("order", "limit", "offset") if node.args.get(k)}
    if not tail:
        return out
    # DuckDB orders (and limits) the whole union; in ClickHouse an ORDER BY after UNION ALL binds to the last
    # SELECT alone, so the union goes into a subquery and the ordering onto the query around it
    wrapped = exp.select("*").from_(exp.Subquery(this=out))
    for k, v in tail.items():
        wrapped.set(k, v)
    return wrapped


def to_clickhouse(sql: str, params: Sequence[object] | None = None) -> list[str]:
    """ClickHouse statements for one DuckDB statement (or several separated by ``;``)."""
    out: list[str] = []
    for tree in sqlglot.parse(bind(sql, params), read="duckdb"):
        if tree is None:
            continue
        tree = _rewrite(tree)
        if isinstance(tree, exp.Create) and tree.kind == "TABLE" and isinstance(tree.expression, exp.Query):
            # DuckDB's CREATE [OR REPLACE] TEMP TABLE x AS SELECT: a Memory table for this connection's run
            name = _sql(tree.this)
            body = tree.expression.sql(dialect="clickhouse", unsupported_level=sqlglot.ErrorLevel.RAISE)
            out.append(f"CREATE OR REPLACE TABLE {name} ENGINE = Memory AS {body}")
            continue
        try:
            out.append(tree.sql(dialect="clickhouse", unsupported_level=sqlglot.ErrorLevel.RAISE))
        except sqlglot.errors.UnsupportedError as exc:
            raise TranspileError(str(exc).splitlines()[0]) from None
    return out
