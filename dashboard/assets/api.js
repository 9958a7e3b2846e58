// api.js — the dashboard's whole contract with the admin API.
//
// Every path the page calls and every JSON field it reads or writes is in
// this file and nowhere else: the screens only see the camelCase objects
// the from*() functions return, and only send bodies the to*() functions
// build. To reconcile the UI with a changed admin API, edit this file.
//
// All calls are same-origin (the dashboard is served from the admin port)
// and carry "Authorization: Bearer <admin token>". Errors arrive as
// {"error":{"message","type","code"}} and surface as ApiError.

const TOKEN_KEY = 'rolter.adminToken';

export const PATHS = {
  cluster: '/api/v1/cluster',
  routes: '/api/v1/routes',
  route: (model) => '/api/v1/routes/' + encodeURIComponent(model),
  providers: '/api/v1/providers',
  groups: '/api/v1/provider-groups',
  // adminapi addresses a group by its name (not its slug)
  group: (name) => '/api/v1/provider-groups/' + encodeURIComponent(name),
  policy: '/api/v1/adaptive-routing-policy',
  telemetry: '/api/v1/adaptive-routing-telemetry',
  audit: '/api/v1/audit',
  strategies: '/api/v1/strategies',
  whoami: '/api/v1/whoami',
  provider: (name) => '/api/v1/providers/' + encodeURIComponent(name),
  keys: '/api/v1/keys',
  key: (name) => '/api/v1/keys/' + encodeURIComponent(name),
  tokens: '/api/v1/admin-tokens',
  token: (name) => '/api/v1/admin-tokens/' + encodeURIComponent(name),
  routeStats: '/api/v1/route-stats',
};

/** An admin API failure: HTTP status plus the server's error object. */
export class ApiError extends Error {
  constructor(status, message, type, code) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.type = type || '';
    this.code = code || '';
  }
  /** The token is missing, wrong or revoked: the operator must sign in again. */
  get unauthorized() { return this.status === 401; }
  /** The token is valid but its role is too low for this call (shown inline). */
  get forbidden() { return this.status === 403; }
}

// ---- token -------------------------------------------------------------

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) { sessionStorage.setItem(TOKEN_KEY, t); }
export function clearToken() { sessionStorage.removeItem(TOKEN_KEY); }

let onUnauthorized = () => {};
/** Registers what to do when a stored token stops being accepted. */
export function handleUnauthorized(fn) { onUnauthorized = fn; }

// ---- transport ---------------------------------------------------------

async function request(method, path, body, tok) {
  const headers = { Accept: 'application/json' };
  const t = tok === undefined ? token() : tok;
  if (t) headers.Authorization = 'Bearer ' + t;
  const init = { method, headers, cache: 'no-store', credentials: 'same-origin' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, 'The admin API did not answer (' + e.message + ').', 'network_error');
  }
  const text = await res.text();
  let json = null;
  if (text) {
    try { json = JSON.parse(text); } catch { json = null; }
  }
  if (!res.ok) {
    const e = (json && json.error) || {};
    const err = new ApiError(res.status, e.message || (res.status + ' ' + res.statusText), e.type, e.code);
    if (err.unauthorized && tok === undefined) onUnauthorized(err);
    throw err;
  }
  return json;
}

// ---- shapes: server JSON -> UI objects ---------------------------------

/**
 * Whether an entry is owned by rolter.toml and so cannot be changed
 * through the admin API. The one place that reads the server's marker:
 * adminapi flags such entries "readonly" today (and "managed_by": "file"
 * where it says who owns an entry).
 */
export function fileOwned(j) { return !!(j && (j.readonly || j.managed_by === 'file')); }

const num = (v, d = 0) => (typeof v === 'number' && isFinite(v) ? v : d);
const numOrNull = (v) => (typeof v === 'number' && isFinite(v) ? v : null);
const arr = (v) => (Array.isArray(v) ? v : []);
// adminapi wraps collections as {"data": [...]}; {"<name>": [...]} is accepted too.
const list = (j, name) => arr(j && (Array.isArray(j.data) ? j.data : j[name]));

/**
 * GET /api/v1/cluster → {leader, config_version,
 *   routers:[{node_id, address | admin_addr, raft_addr, build, raft_role,
 *     applied_config_version | config_version (null: unknown), alive,
 *     admission: {queues: {pool: {critical, standard, sheddable}},
 *       engine_saturation: {target: 0..}} (omitted: [admission] off),
 *     admission_reported_at}],
 *   engines:[{node_id, engine_url, models, state, age_ms, resident_blocks,
 *     running, waiting, kv_usage, lmcache_occupancy, adapters, kv_events,
 *     lmcache, prefix_cache_hit_rate, queued_prefill_tokens}]}
 * prefix_cache_hit_rate (0..1 or null) is optional; without it the hit-rate
 * chart says so.
 */
export function fromCluster(j) {
  j = j || {};
  return {
    leader: j.leader || '',
    configVersion: num(j.config_version),
    routers: arr(j.routers).map((r) => ({
      nodeId: r.node_id || '',
      // the admin address for every row (what an operator opens); Raft's
      // beside it
      address: r.address || r.admin_addr || '',
      raftAddr: r.raft_addr || '',
      build: r.build || '',
      raftRole: (r.raft_role || 'unknown').toLowerCase(),
      appliedConfigVersion: numOrNull(r.applied_config_version !== undefined ? r.applied_config_version : r.config_version),
      alive: r.alive !== false,
      admission: fromAdmission(r.admission),
    })),
    engines: arr(j.engines).map((e) => ({
      nodeId: e.node_id || '',
      engineUrl: e.engine_url || '',
      models: arr(e.models),
      state: (e.state || 'STALE').toUpperCase(),
      ageMs: num(e.age_ms),
      residentBlocks: num(e.resident_blocks),
      running: num(e.running),
      waiting: num(e.waiting),
      kvUsage: numOrNull(e.kv_usage),
      lmcacheOccupancy: numOrNull(e.lmcache_occupancy),
      adapters: arr(e.adapters),
      kvEvents: !!e.kv_events,
      lmcache: !!e.lmcache,
      hitRate: numOrNull(e.prefix_cache_hit_rate),
      queuedPrefill: num(e.queued_prefill_tokens),
    })),
  };
}

/**
 * A router's admission state: queues [{pool, critical, standard,
 * sheddable}] sorted by pool, saturation [{target, value}] sorted by
 * target; null when the router reports none ([admission] off).
 */
function fromAdmission(a) {
  if (!a || typeof a !== 'object') return null;
  const queues = Object.entries(a.queues || {}).map(([pool, q]) => ({
    pool, critical: num(q && q.critical), standard: num(q && q.standard), sheddable: num(q && q.sheddable),
  })).sort((x, y) => x.pool.localeCompare(y.pool));
  const saturation = Object.entries(a.engine_saturation || {}).map(([target, v]) => ({ target, value: num(v) }))
    .sort((x, y) => x.target.localeCompare(y.target));
  return { queues, saturation };
}

function fromTarget(t) {
  return { provider: t.provider || '', model: t.model || '', weight: num(t.weight, 1) };
}

/**
 * Who owns an entry: "file" (rolter.toml declares it; read-only in the API)
 * or "api". Older servers send only readonly.
 */
function managedBy(x) {
  if (x.managed_by === 'file' || x.managed_by === 'api') return x.managed_by;
  return x.readonly ? 'file' : 'api';
}

/** One route of GET /api/v1/routes → {routes:[{model, strategy, targets, discover, readonly, managed_by}]}. */
export function fromRoute(r) {
  return {
    raw: r,
    key: r.model,
    model: r.model || '',
    strategy: r.strategy || '',
    targets: arr(r.targets).map(fromTarget),
    discover: !!r.discover,
    maxLoras: num(r.max_loras),
    // null: this admin API has no enabled flag
    enabled: typeof r.enabled === 'boolean' ? r.enabled : null,
    readonly: fileOwned(r),
    managedBy: managedBy(r),
  };
}

/** One group of GET /api/v1/provider-groups → {groups:[{name, slug, strategy, members, readonly}]}. */
export function fromGroup(g) {
  return {
    raw: g,
    key: g.slug,
    name: g.name || g.slug || '',
    slug: g.slug || '',
    strategy: g.strategy || '',
    targets: arr(g.members).map(fromTarget),
    discover: false,
    maxLoras: num(g.max_loras),
    enabled: typeof g.enabled === 'boolean' ? g.enabled : null,
    readonly: fileOwned(g),
    managedBy: managedBy(g),
  };
}

/** GET /api/v1/providers → {providers:[{name, api_base, price_in_per_mtok, price_out_per_mtok, readonly}]}. */
export function fromProvider(p) {
  return {
    raw: p,
    name: p.name || '',
    apiBase: p.api_base || '',
    apiKeyEnv: p.api_key_env || '',
    priceIn: num(p.price_in_per_mtok),
    priceOut: num(p.price_out_per_mtok),
    readonly: fileOwned(p),
    managedBy: managedBy(p),
  };
}

/** The POST/PUT body of a provider (prices as typed: the server validates). */
export function toProviderBody(p) {
  const body = { name: p.name, api_base: p.apiBase, price_in_per_mtok: p.priceIn, price_out_per_mtok: p.priceOut };
  if (p.apiKeyEnv) body.api_key_env = p.apiKeyEnv;
  return body;
}

function toTargets(ts) {
  return ts.map((t) => {
    const o = { provider: t.provider, weight: t.weight };
    if (t.model) o.model = t.model;
    return o;
  });
}

/**
 * The POST/PUT body of a route or group from the full editor. Fields this
 * UI does not edit are sent back as the server sent them (raw).
 */
export function toRouteBody(r, raw) {
  const body = Object.assign(JSON.parse(JSON.stringify(raw || {})),
    { model: r.model, strategy: r.strategy, targets: toTargets(r.targets), discover: !!r.discover, max_loras: r.maxLoras || 0 });
  if (typeof r.enabled === 'boolean') body.enabled = r.enabled; // only sent where the API has it
  delete body.readonly;
  return body;
}

export function toGroupBody(g, raw) {
  const body = Object.assign(JSON.parse(JSON.stringify(raw || {})),
    { name: g.name, slug: g.slug, strategy: g.strategy, members: toTargets(g.targets), max_loras: g.maxLoras || 0 });
  if (typeof g.enabled === 'boolean') body.enabled = g.enabled;
  delete body.readonly;
  return body;
}

/**
 * GET /api/v1/keys → {data:[{name, models, providers?, readonly, created_at}]};
 * POST answers the secret once. providers (the provider allowlist) is null
 * where this admin API has none.
 */
export function fromKey(k) {
  return {
    name: k.name || '',
    models: arr(k.models),
    providers: Array.isArray(k.providers) ? k.providers : null,
    createdAt: k.created_at || '',
    readonly: fileOwned(k),
    secret: k.secret || '',
  };
}

/** GET /api/v1/admin-tokens → {data:[{name, role, readonly}]}; POST answers the secret once. */
export function fromToken(t) {
  return { name: t.name || '', role: t.role || '', readonly: fileOwned(t), secret: t.secret || '' };
}

/** GET /api/v1/whoami → {name, role}. */
export function fromWhoami(j) {
  j = j || {};
  return { name: j.name || '', role: j.role || '' };
}

function fromWindow(w) {
  w = w || {};
  return {
    seconds: num(w.seconds),
    stepSeconds: num(w.step_seconds, 10),
    requests: num(w.requests),
    rps: num(w.requests_per_sec),
    attempts: num(w.attempts),
    errors: num(w.errors),
    retries: num(w.retries),
    errorRate: num(w.error_rate),
    targets: arr(w.targets).map((t) => ({
      target: t.target || '',
      provider: t.provider || '',
      attempts: num(t.attempts),
      errors: num(t.errors),
      retries: num(t.retries),
      share: num(t.share),
      errorRate: num(t.error_rate),
      ttftP50: numOrNull(t.ttft_p50_ms),
      ttftP90: numOrNull(t.ttft_p90_ms),
      latencyP50: numOrNull(t.latency_p50_ms),
      latencyP90: numOrNull(t.latency_p90_ms),
      hitRate: numOrNull(t.prefix_cache_hit_rate),
      points: arr(t.points).map((p) => ({ t: num(p.t), attempts: num(p.attempts), errors: num(p.errors), latencyP50: numOrNull(p.latency_p50_ms) })),
    })),
  };
}

/**
 * GET /api/v1/route-stats → {generated_at, routes:[{pool, nodes,
 *   windows:{"5m"|"60m": {seconds, step_seconds, requests,
 *   requests_per_sec, attempts, errors, retries, error_rate,
 *   targets:[{target, provider, attempts, errors, retries, share,
 *   error_rate, ttft_p50_ms, ttft_p90_ms, latency_p50_ms, latency_p90_ms,
 *   prefix_cache_hit_rate (null: the engine reported no cached tokens),
 *   points:[{t, attempts, errors, latency_p50_ms}]}]}}}]}
 */
export function fromRouteStats(j) {
  j = j || {};
  return {
    generatedAt: j.generated_at || '',
    routes: arr(j.routes).map((r) => ({
      pool: r.pool || '',
      nodes: arr(r.nodes),
      windows: { '5m': fromWindow((r.windows || {})['5m']), '60m': fromWindow((r.windows || {})['60m']) },
    })),
  };
}

/**
 * Builds the PUT body for a route or group from the object the server sent,
 * changing only what the operator edited. The strategy is written only when
 * the operator touched the picker (edits.strategy !== undefined); any field
 * this UI does not know is sent back as it came.
 */
function withEdits(raw, listField, edits) {
  const body = JSON.parse(JSON.stringify(raw));
  if (edits.strategy !== undefined) body.strategy = edits.strategy;
  if (edits.weights) {
    body[listField] = arr(body[listField]).map((t, i) =>
      edits.weights[i] === undefined ? t : Object.assign({}, t, { weight: edits.weights[i] }));
  }
  return body;
}

/**
 * GET/PUT /api/v1/adaptive-routing-policy:
 * {enabled, latency_weight, cost_weight, load_weight, exploration_ratio,
 *  min_samples, updated_at, affected_routes}
 */
export function fromPolicy(p) {
  p = p || {};
  return {
    enabled: !!p.enabled,
    latencyWeight: num(p.latency_weight),
    costWeight: num(p.cost_weight),
    loadWeight: num(p.load_weight),
    explorationRatio: num(p.exploration_ratio),
    minSamples: num(p.min_samples),
    updatedAt: p.updated_at || '',
    affectedRoutes: arr(p.affected_routes),
  };
}

/** The PUT body: all six policy fields, each required by the server. */
export function toPolicyBody(p) {
  return {
    enabled: p.enabled,
    latency_weight: p.latencyWeight,
    cost_weight: p.costWeight,
    load_weight: p.loadWeight,
    exploration_ratio: p.explorationRatio,
    min_samples: p.minSamples,
  };
}

/**
 * GET /api/v1/adaptive-routing-telemetry → {generated_at, fresh_window_secs,
 *   routes:[{model, engaged, nodes:[{node_id, engaged, observed,
 *     decisions:{blend, exploration, fallback}, policy, reported_at,
 *     targets:[{target, provider, upstream_model, score, latency_score,
 *       cost_score, load_score, latency_ms, cost_per_mtok, in_flight,
 *       samples, last_sample_age_ms}]}]}]}
 */
export function fromTelemetry(j) {
  j = j || {};
  return {
    generatedAt: j.generated_at || '',
    freshWindowSecs: num(j.fresh_window_secs, 60),
    routes: arr(j.routes).map((r) => ({
      model: r.model || '',
      engaged: !!r.engaged,
      nodes: arr(r.nodes).map((n) => {
        const d = n.decisions || {};
        return {
          nodeId: n.node_id || '',
          engaged: !!n.engaged,
          observed: num(n.observed),
          decisions: { blend: num(d.blend), exploration: num(d.exploration), fallback: num(d.fallback) },
          policy: n.policy ? fromPolicy(n.policy) : null,
          reportedAt: n.reported_at || '',
          targets: arr(n.targets).map((t) => ({
            target: t.target || '',
            provider: t.provider || '',
            upstreamModel: t.upstream_model || '',
            score: num(t.score),
            latencyScore: num(t.latency_score),
            costScore: num(t.cost_score),
            loadScore: num(t.load_score),
            latencyMs: numOrNull(t.latency_ms),
            costPerMtok: numOrNull(t.cost_per_mtok),
            inFlight: num(t.in_flight),
            samples: num(t.samples),
            lastSampleAgeMs: numOrNull(t.last_sample_age_ms),
          })),
        };
      }),
    })),
  };
}

/**
 * GET /api/v1/audit → {data | entries:[{seq, time, actor, action, resource,
 *   outcome, config_version, detail}]} (adminapi sends outcome and
 * config_version; detail is optional).
 */
export function fromAudit(j) {
  return list(j, 'entries').map((e) => ({
    seq: numOrNull(e.seq),
    time: e.time || '',
    actor: e.actor || '',
    action: e.action || '',
    resource: e.resource || '',
    outcome: e.outcome || '',
    configVersion: numOrNull(e.config_version),
    // a config.file_sync carries its diff, one line per changed field
    detail: e.detail !== undefined && e.detail !== null ? e.detail : (Array.isArray(e.diff) ? e.diff.join('\n') : ''),
  }));
}

/**
 * GET /api/v1/strategies → {strategies:[{name, uses_weights, needs_telemetry}]},
 * needs_telemetry being "kv_events", "lmcache" or null. Resolves to null when
 * the endpoint does not exist (404/405), so the caller falls back to its
 * built-in list.
 */
export async function strategies() {
  try {
    const j = await request('GET', PATHS.strategies);
    return list(j, 'strategies').map((s) => ({
      name: s.name,
      usesWeights: !!s.uses_weights,
      needsTelemetry: s.needs_telemetry || null,
    }));
  } catch (e) {
    if (e instanceof ApiError && (e.status === 404 || e.status === 405)) return null;
    throw e;
  }
}

// ---- calls -------------------------------------------------------------

/** Checks a token without storing it; rejects with ApiError when refused. */
export async function checkToken(t) { await request('GET', PATHS.cluster, undefined, t); }

export async function cluster() { return fromCluster(await request('GET', PATHS.cluster)); }
export async function routes() { return list(await request('GET', PATHS.routes), 'routes').map(fromRoute); }
export async function groups() { return list(await request('GET', PATHS.groups), 'groups').map(fromGroup); }
export async function providers() { return list(await request('GET', PATHS.providers), 'providers').map(fromProvider); }

/** PUT /api/v1/routes/{model} with the route object; answers the stored route. */
export async function saveRoute(route, edits) {
  return fromRoute(await request('PUT', PATHS.route(route.model), withEdits(route.raw, 'targets', edits)));
}

/** PUT /api/v1/provider-groups/{name} with the group object; answers the stored group. */
export async function saveGroup(group, edits) {
  return fromGroup(await request('PUT', PATHS.group(group.name), withEdits(group.raw, 'members', edits)));
}

/** POST /api/v1/routes (create) or PUT /api/v1/routes/{model} (update). */
export async function createRoute(r) { return fromRoute(await request('POST', PATHS.routes, toRouteBody(r))); }
export async function updateRoute(r, raw) { return fromRoute(await request('PUT', PATHS.route(r.model), toRouteBody(r, raw))); }
export async function deleteRoute(model) { await request('DELETE', PATHS.route(model)); }
export async function createGroup(g) { return fromGroup(await request('POST', PATHS.groups, toGroupBody(g))); }
export async function updateGroup(g, raw) { return fromGroup(await request('PUT', PATHS.group(g.name), toGroupBody(g, raw))); }
export async function deleteGroup(name) { await request('DELETE', PATHS.group(name)); }

export async function createProvider(p) { return fromProvider(await request('POST', PATHS.providers, toProviderBody(p))); }
export async function updateProvider(p) { return fromProvider(await request('PUT', PATHS.provider(p.name), toProviderBody(p))); }
export async function deleteProvider(name) { await request('DELETE', PATHS.provider(name)); }

export async function keys() { return list(await request('GET', PATHS.keys), 'keys').map(fromKey); }
/** POST /api/v1/keys {name, models[, providers]}: the answer carries the secret, this once. */
export async function createKey(name, models, providers) {
  const body = { name, models };
  if (providers) body.providers = providers; // only where the API has provider allowlists
  return fromKey(await request('POST', PATHS.keys, body));
}
export async function deleteKey(name) { await request('DELETE', PATHS.key(name)); }

export async function tokens() { return list(await request('GET', PATHS.tokens), 'tokens').map(fromToken); }
export async function createToken(name, role) { return fromToken(await request('POST', PATHS.tokens, { name, role })); }
export async function deleteToken(name) { await request('DELETE', PATHS.token(name)); }

/** Who the stored token is; null when the server has no whoami endpoint. */
export async function whoami() {
  try {
    return fromWhoami(await request('GET', PATHS.whoami));
  } catch (e) {
    if (e instanceof ApiError && (e.status === 404 || e.status === 405)) return null;
    throw e;
  }
}

export async function routeStats() { return fromRouteStats(await request('GET', PATHS.routeStats)); }

export async function policy() { return fromPolicy(await request('GET', PATHS.policy)); }
export async function savePolicy(p) { return fromPolicy(await request('PUT', PATHS.policy, toPolicyBody(p))); }
export async function telemetry() { return fromTelemetry(await request('GET', PATHS.telemetry)); }
export async function audit() { return fromAudit(await request('GET', PATHS.audit)); }
