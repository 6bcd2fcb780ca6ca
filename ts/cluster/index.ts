// The `deliberate/cluster` entry: replicas join over NATS (`deliberate serve --cluster`), a program-aware router
// fronts them (`deliberate router`). Nothing inside ts/ imports this file.
export { joinCluster, connectCluster, LEAVE_BOUND_MS, NATS_STEP_MS } from "./replica.js";
export type { ClusterMember, JoinClusterOptions } from "./replica.js";
export { createRouter } from "./router.js";
export type { DeliberateRouter, RouterOptions } from "./router.js";
export { REPLICA_BUCKET, DEFAULT_HEARTBEAT_MS, DEFAULT_STALE_MS } from "./membership.js";
export { ROUTING_POLICIES } from "./routing.js";
export type { ReplicaReport, RouteDecision, RouteReason, RoutingPolicy } from "./routing.js";
