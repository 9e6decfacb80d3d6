package ctl

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/dpd-dev/dpd/proto/felix"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// LoadScenario reads a scenario file: ToDataplane messages in YAML or JSON,
// using the proto JSON mapping's field names, either as a top-level list or
// as {messages: [...]}.
func LoadScenario(path string) ([]*felix.ToDataplane, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	msgs, err := ParseScenario(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return msgs, nil
}

// ParseScenario parses scenario text (YAML, of which JSON is a subset).
func ParseScenario(data []byte) ([]*felix.ToDataplane, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		var doc struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err2 := json.Unmarshal(js, &doc); err2 != nil || doc.Messages == nil {
			return nil, fmt.Errorf("want a list of messages or {messages: [...]}")
		}
		raw = doc.Messages
	}
	msgs := make([]*felix.ToDataplane, len(raw))
	for i, r := range raw {
		msgs[i] = &felix.ToDataplane{}
		if err := protojson.Unmarshal(r, msgs[i]); err != nil {
			return nil, fmt.Errorf("message %d: %w", i+1, err)
		}
		if msgs[i].GetPayload() == nil {
			return nil, fmt.Errorf("message %d: no payload", i+1)
		}
	}
	return msgs, nil
}
