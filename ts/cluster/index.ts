// The cluster's public surface (re-exported from ts/index.ts): replicas join over NATS, a router fronts them.
export { joinCluster, connectCluster } from "./replica.js";
export type { ClusterMember, JoinClusterOptions } from "./replica.js";
export { createRouter } from "./router.js";
export type { DeliberateRouter, RouterOptions } from "./router.js";
export { ClusterView, ReplicaRegistration, REPLICA_BUCKET, DEFAULT_HEARTBEAT_MS, DEFAULT_STALE_MS } from "./membership.js";
export { HashRing, hash32 } from "./hashRing.js";
export { route, eligible, loadCap, loadOf, programIdOf, promptPrefix, RingCache, ROUTING_POLICIES } from "./routing.js";
export type { ReplicaReport, ReplicaView, RouteDecision, RouteKey, RouteOptions, RouteReason, RoutingPolicy } from "./routing.js";
