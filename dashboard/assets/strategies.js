// strategies.js — what the editors know about each strategy when the admin
// API does not list them (no strategies endpoint). It mirrors
// strategies.UsesWeights in strategies/registry.go and the names compat.md
// fixes; a strategy that starts reading weights must be added here too, or
// the dashboard will tell operators its weights do nothing.

export const BUILTIN = [
  'round_robin', 'random', 'power_of_two', 'consistent_hash', 'cache_aware', 'weighted',
  'pipeline', 'cheapest', 'fastest', 'precise_cache_aware', 'lmcache_aware', 'adaptive',
  'lora_aware', 'predicted_latency',
].map((name) => ({
  name,
  usesWeights: name === 'weighted' || name === 'pipeline' || name === 'adaptive',
  needsTelemetry: name === 'precise_cache_aware' ? 'kv_events' : name === 'lmcache_aware' ? 'lmcache' : null,
}));

/** Strategies never offered by a per-route picker: adaptive is governed by the deployment-wide policy. */
export const NOT_OFFERED = new Set(['adaptive']);

export class Catalog {
  constructor(list) {
    this.list = list && list.length ? list : BUILTIN;
    this.byName = new Map(this.list.map((s) => [s.name, s]));
  }
  offered() { return this.list.filter((s) => !NOT_OFFERED.has(s.name)); }
  usesWeights(name) {
    const s = this.byName.get(name);
    return s ? s.usesWeights : false;
  }
  needsTelemetry(name) {
    const s = this.byName.get(name);
    return s ? s.needsTelemetry : null;
  }
}
