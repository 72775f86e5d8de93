package ingest

import (
	"encoding/json"
	"net/http"
	"sort"
)

// problem is an RFC 9457 problem details object (application/problem+json),
// with the extension members this API uses.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Tier names the quota tier that refused (429) or that a batch exceeds (413).
	Tier string `json:"tier,omitempty"`
	// ViolatedPolicies is the draft's quota-exceeded extension member.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// InvalidParams names each bad field (400).
	InvalidParams []invalidParam `json:"invalid-params,omitempty"`
	// Answer is the per-envelope outcome when some were produced (503, 409).
	Answer *Answer `json:"answer,omitempty"`
}

type invalidParam struct {
	Line   int    `json:"line,omitempty"`
	ID     string `json:"id,omitempty"` // the line's id, when it has one
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	for i := range p.InvalidParams {
		if p.InvalidParams[i].Name == "" {
			p.InvalidParams[i].Name = "body"
		}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

func sortAnswer(a *Answer) {
	sort.Slice(a.Accepted, func(i, j int) bool { return a.Accepted[i].Line < a.Accepted[j].Line })
	sort.Slice(a.Rejected, func(i, j int) bool { return a.Rejected[i].Line < a.Rejected[j].Line })
	if a.Accepted == nil {
		a.Accepted = []Accepted{}
	}
	if a.Rejected == nil {
		a.Rejected = []Rejected{}
	}
}
