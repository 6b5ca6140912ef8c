package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

// Cluster-level APIs a client expects of any node: _cluster/settings,
// _cluster/stats and _cluster/pending_tasks.

// clusterSettingDefaults are the dynamic cluster settings this server
// takes, with OpenSearch's defaults. They are stored and shown, in memory
// (a restart forgets them, transient and persistent alike), and none
// changes what the server does: shardsplit allocates, recovers and
// throttles by its own rules. A setting not listed is refused as
// OpenSearch refuses an unknown one.
var clusterSettingDefaults = map[string]string{
	"action.auto_create_index":                              "true",
	"action.destructive_requires_name":                      "false",
	"cluster.max_shards_per_node":                           "1000",
	"cluster.routing.allocation.enable":                     "all",
	"cluster.routing.rebalance.enable":                      "all",
	"cluster.routing.allocation.disk.threshold_enabled":     "true",
	"cluster.routing.allocation.disk.watermark.low":         "85%",
	"cluster.routing.allocation.disk.watermark.high":        "90%",
	"cluster.routing.allocation.disk.watermark.flood_stage": "95%",
	"indices.recovery.max_bytes_per_sec":                    "40mb",
	"search.default_search_timeout":                         "-1",
}

// clusterSettings holds the stored cluster settings.
type clusterSettings struct {
	mu                    sync.Mutex
	persistent, transient map[string]string
}

// flattenSettings flattens a settings object to dotted names; a null is a
// nil value (a reset).
func flattenSettings(prefix string, obj map[string]any, out map[string]*string) {
	for k, v := range obj {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		switch x := v.(type) {
		case map[string]any:
			flattenSettings(key, x, out)
		case nil:
			out[key] = nil
		case string:
			out[key] = &x
		default:
			b, _ := json.Marshal(x)
			s := string(b)
			out[key] = &s
		}
	}
}

func settingsView(flat map[string]string, asFlat bool) any {
	if asFlat {
		return flat
	}
	return service.NestedSettings(flat)
}

// getClusterSettings is GET /_cluster/settings: persistent and transient,
// nested unless flat_settings, and with include_defaults the defaults of
// the settings it takes.
func (s *Server) getClusterSettings(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "flat_settings", "include_defaults", "master_timeout", "cluster_manager_timeout", "timeout", "local")
	if err != nil {
		return err
	}
	flat, err := boolParam(q, "flat_settings", false)
	if err != nil {
		return err
	}
	defaults, err := boolParam(q, "include_defaults", false)
	if err != nil {
		return err
	}
	s.cset.mu.Lock()
	body := map[string]any{"persistent": settingsView(cloneMap(s.cset.persistent), flat),
		"transient": settingsView(cloneMap(s.cset.transient), flat)}
	s.cset.mu.Unlock()
	if defaults {
		body["defaults"] = settingsView(cloneMap(clusterSettingDefaults), flat)
	}
	s.writeJSON(w, r, http.StatusOK, body)
	return nil
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// putClusterSettings is PUT /_cluster/settings {"persistent":{...},
// "transient":{...}}: each named setting set (null resets it), answered
// with the changes as ClusterUpdateSettingsResponse has them. An unknown
// setting refuses the whole request with SettingsUpdater's message.
func (s *Server) putClusterSettings(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "flat_settings", "master_timeout", "cluster_manager_timeout", "timeout")
	if err != nil {
		return err
	}
	flat, err := boolParam(q, "flat_settings", false)
	if err != nil {
		return err
	}
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest,
			Reason: "Validation Failed: 1: no settings to update;"}
	}
	m, err := decodeObject(b)
	if err != nil {
		return err
	}
	if err := checkKeys(m, "cluster_update_settings_request", "persistent", "transient"); err != nil {
		return err
	}
	changes := map[string]map[string]*string{}
	for _, scope := range []string{"persistent", "transient"} {
		changes[scope] = map[string]*string{}
		raw, ok := m[scope]
		if !ok {
			continue
		}
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			return parseErr("[%s] must be an object: %v", scope, err)
		}
		flattenSettings("", obj, changes[scope])
		names := make([]string, 0, len(changes[scope]))
		for k := range changes[scope] {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if _, known := clusterSettingDefaults[k]; !known && !strings.HasSuffix(k, "*") {
				return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
					Reason: fmt.Sprintf("%s setting [%s], not recognized", scope, k)}
			}
		}
	}
	if len(changes["persistent"]) == 0 && len(changes["transient"]) == 0 {
		return &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest,
			Reason: "Validation Failed: 1: no settings to update;"}
	}
	s.cset.mu.Lock()
	applied := map[string]map[string]string{"persistent": {}, "transient": {}}
	for scope, set := range changes {
		dst := &s.cset.persistent
		if scope == "transient" {
			dst = &s.cset.transient
		}
		if *dst == nil {
			*dst = map[string]string{}
		}
		for k, v := range set {
			for name := range clusterSettingDefaults {
				if name == k || (strings.HasSuffix(k, "*") && service.GlobMatch(k, name)) {
					if v == nil {
						delete(*dst, name)
					} else {
						(*dst)[name] = *v
						applied[scope][name] = *v
					}
				}
			}
		}
	}
	s.cset.mu.Unlock()
	s.writeJSON(w, r, http.StatusOK, map[string]any{"acknowledged": true,
		"persistent": settingsView(applied["persistent"], flat), "transient": settingsView(applied["transient"], flat)})
	return nil
}

// clusterStats is GET /_cluster/stats[/nodes/{node_id}]: the indices'
// counts, shards, documents and store, and the nodes by role and version.
func (s *Server) clusterStats(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "timeout", "flat_settings"); err != nil {
		return err
	}
	filter := r.PathValue("node_id")
	if filter == "" {
		filter = "_all"
	}
	nodes := s.matchingNodes(filter)
	stats, err := s.svc.Stats("")
	if err != nil {
		return err
	}
	_, status, err := s.healthBody("")
	if err != nil {
		return err
	}
	var shards, primaries int
	var docs, bytes int64
	type minMax struct{ min, max, sum float64 }
	var perShards, perPri, perRep minMax
	first := true
	add := func(m *minMax, v float64) {
		if first || v < m.min {
			m.min = v
		}
		if first || v > m.max {
			m.max = v
		}
		m.sum += v
	}
	for _, st := range stats {
		shards += st.Active
		primaries += st.Primaries
		docs += st.Docs
		bytes += st.Bytes
		rep := 0.0
		if st.Primaries > 0 {
			rep = float64(st.Active-st.Primaries) / float64(st.Primaries)
		}
		add(&perShards, float64(st.Active))
		add(&perPri, float64(st.Primaries))
		add(&perRep, rep)
		first = false
	}
	avg := func(m minMax) map[string]float64 {
		a := 0.0
		if len(stats) > 0 {
			a = m.sum / float64(len(stats))
		}
		return map[string]float64{"min": m.min, "max": m.max, "avg": a}
	}
	replication := 0.0
	if primaries > 0 {
		replication = float64(shards-primaries) / float64(primaries)
	}
	n := len(nodes)
	body := map[string]any{
		"_nodes":       map[string]int{"total": n, "successful": n, "failed": 0},
		"cluster_name": s.cfg.ClusterName,
		"cluster_uuid": s.svc.ClusterUUID(),
		"timestamp":    time.Now().UnixMilli(),
		"status":       status,
		"indices": map[string]any{
			"count": len(stats),
			"shards": map[string]any{"total": shards, "primaries": primaries, "replication": replication,
				"index": map[string]any{"shards": avg(perShards), "primaries": avg(perPri), "replication": avg(perRep)}},
			"docs":  map[string]int64{"count": docs, "deleted": 0},
			"store": map[string]int64{"size_in_bytes": bytes, "reserved_in_bytes": 0},
		},
		"nodes": map[string]any{
			"count": map[string]int{"total": n, "cluster_manager": n, "coordinating_only": 0, "data": n, "ingest": n,
				"master": n, "remote_cluster_client": n, "search": 0, "warm": 0},
			"versions": []string{service.Version},
			"os": map[string]any{"available_processors": runtime.NumCPU() * n, "allocated_processors": runtime.GOMAXPROCS(0) * n,
				"names": []map[string]any{{"name": strings.ToUpper(runtime.GOOS[:1]) + runtime.GOOS[1:], "count": n}}},
		},
	}
	s.writeJSON(w, r, http.StatusOK, body)
	return nil
}

// pendingTasks is GET /_cluster/pending_tasks: the cluster-state updates
// waiting to run. A single node applies each update as it is asked, and
// a cluster's manager proposes them to raft at once, so none waits here.
func (s *Server) pendingTasks(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "local", "master_timeout", "cluster_manager_timeout"); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"tasks": []any{}})
	return nil
}
