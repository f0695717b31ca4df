// k8s-validate checks Kubernetes manifests offline, without a cluster: every YAML document of
// every file given is decoded strictly into the real API type of its apiVersion and kind
// (k8s.io/api), so that an unknown field (a typo, a field at the wrong level) or a value of the
// wrong type fails, as the API server would refuse it. On top of the decode it checks what the
// types cannot: each container's volume mounts name volumes of its pod, a workload's selector
// matches its pod template's labels, and each ConfigMap or Secret a container takes its
// environment from is defined among the files (Secrets may be made outside them: --secret NAME).
//
// Usage: k8s-validate [--secret NAME]... FILE...
// Exit status 0 when every document passes, 1 otherwise (each problem on stderr, one a line).
// On success stdout is one JSON object describing the containers, for further checks (the laminar
// flags of each container are checked against the CLI by test/deploy/kubernetes.test.ts).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Container is what the JSON summary says of one container (init containers included).
type Container struct {
	File    string   `json:"file"`
	Object  string   `json:"object"`
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	// Env are the names of the variables set one by one; EnvFrom the ConfigMaps taken whole.
	Env     []string `json:"env"`
	EnvFrom []string `json:"envFrom"`
}

// Summary is the JSON printed on success.
type Summary struct {
	Objects    []string            `json:"objects"`
	Containers []Container         `json:"containers"`
	ConfigMaps map[string][]string `json:"configMaps"`
	// ConfigMapData is each ConfigMap's data, for tests that run what a ConfigMap holds.
	ConfigMapData map[string]map[string]string `json:"configMapData"`
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme, rbacv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// documents splits a YAML stream into its documents, dropping empty ones (comments only).
func documents(r io.Reader) ([][]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, err
		}
		if len(probe) > 0 {
			docs = append(docs, doc)
		}
	}
}

// decode decodes one document strictly into the type its apiVersion and kind name.
func decode(s *runtime.Scheme, doc []byte) (runtime.Object, error) {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, err
	}
	gv, err := schema.ParseGroupVersion(meta.APIVersion)
	if err != nil {
		return nil, err
	}
	obj, err := s.New(gv.WithKind(meta.Kind))
	if err != nil {
		return nil, fmt.Errorf("unknown apiVersion/kind %s/%s", meta.APIVersion, meta.Kind)
	}
	// Unknown fields and duplicate keys are errors; a value of the wrong type is one too.
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// Pod is the pod template of an object that has one.
type Pod struct {
	Spec   *corev1.PodSpec
	Labels map[string]string
	// Selector must be given and match Labels (Deployments, DaemonSets, StatefulSets; a Job's is generated).
	Selector      *metav1.LabelSelector
	NeedsSelector bool
	// ClaimVolumes are the volumes a StatefulSet's volumeClaimTemplates add to each pod.
	ClaimVolumes []string
}

// podOf returns the pod template of a workload or pod, or false.
func podOf(obj runtime.Object) (Pod, bool) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return Pod{&o.Spec.Template.Spec, o.Spec.Template.Labels, o.Spec.Selector, true, nil}, true
	case *appsv1.DaemonSet:
		return Pod{&o.Spec.Template.Spec, o.Spec.Template.Labels, o.Spec.Selector, true, nil}, true
	case *appsv1.StatefulSet:
		claims := []string{}
		for _, t := range o.Spec.VolumeClaimTemplates {
			claims = append(claims, t.Name)
		}
		return Pod{&o.Spec.Template.Spec, o.Spec.Template.Labels, o.Spec.Selector, true, claims}, true
	case *batchv1.Job:
		return Pod{&o.Spec.Template.Spec, o.Spec.Template.Labels, o.Spec.Selector, false, nil}, true
	case *corev1.Pod:
		return Pod{&o.Spec, o.Labels, nil, false, nil}, true
	}
	return Pod{}, false
}

// checkPod returns the problems of one pod template that the types do not catch.
func checkPod(p Pod) []string {
	var problems []string
	pod := p.Spec
	if p.NeedsSelector && p.Selector == nil {
		problems = append(problems, "no spec.selector")
	}
	if p.Selector != nil {
		for k, v := range p.Selector.MatchLabels {
			if p.Labels[k] != v {
				problems = append(problems, fmt.Sprintf("selector %s=%s does not match the pod template's labels", k, v))
			}
		}
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		if volumes[v.Name] {
			problems = append(problems, fmt.Sprintf("volume %q defined twice", v.Name))
		}
		volumes[v.Name] = true
	}
	for _, name := range p.ClaimVolumes {
		volumes[name] = true
	}
	names := map[string]bool{}
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		if names[c.Name] {
			problems = append(problems, fmt.Sprintf("container %q defined twice", c.Name))
		}
		names[c.Name] = true
		if c.Image == "" {
			problems = append(problems, fmt.Sprintf("container %q has no image", c.Name))
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				problems = append(problems, fmt.Sprintf("container %q mounts volume %q, which the pod does not define", c.Name, m.Name))
			}
		}
	}
	return problems
}

func summarise(file, object string, pod *corev1.PodSpec) []Container {
	var out []Container
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		entry := Container{File: file, Object: object, Name: c.Name, Image: c.Image, Command: c.Command, Args: c.Args, Env: []string{}, EnvFrom: []string{}}
		for _, e := range c.Env {
			entry.Env = append(entry.Env, e.Name)
		}
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				entry.EnvFrom = append(entry.EnvFrom, e.ConfigMapRef.Name)
			}
		}
		out = append(out, entry)
	}
	return out
}

type refs struct{ configMaps, secrets map[string]string }

// references notes which ConfigMaps and Secrets a pod needs, with where, to check once all files are read.
func (r refs) add(pod *corev1.PodSpec, where string) {
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				r.configMaps[e.ConfigMapRef.Name] = where
			}
			if e.SecretRef != nil {
				r.secrets[e.SecretRef.Name] = where
			}
		}
	}
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil {
			r.configMaps[v.ConfigMap.Name] = where
		}
		if v.Secret != nil {
			r.secrets[v.Secret.SecretName] = where
		}
	}
}

func main() {
	var files []string
	external := map[string]bool{}
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		if args[i] == "--secret" && i+1 < len(args) {
			external[args[i+1]] = true
			i++
			continue
		}
		files = append(files, args[i])
	}
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "usage: k8s-validate [--secret NAME]... FILE...")
		os.Exit(2)
	}
	s := newScheme()
	summary := Summary{Objects: []string{}, Containers: []Container{}, ConfigMaps: map[string][]string{}, ConfigMapData: map[string]map[string]string{}}
	secrets := map[string]bool{}
	needed := refs{configMaps: map[string]string{}, secrets: map[string]string{}}
	var problems []string
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		docs, err := documents(bytes.NewReader(data))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		if len(docs) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no Kubernetes object in it", file))
		}
		for i, doc := range docs {
			obj, err := decode(s, doc)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: document %d: %v", file, i+1, err))
				continue
			}
			accessor, _ := obj.(metav1.Object)
			kind := obj.GetObjectKind().GroupVersionKind().Kind
			object := fmt.Sprintf("%s/%s", kind, accessor.GetName())
			if accessor.GetName() == "" {
				problems = append(problems, fmt.Sprintf("%s: document %d (%s): no metadata.name", file, i+1, kind))
			}
			summary.Objects = append(summary.Objects, object)
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				keys := []string{}
				for k := range o.Data {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				summary.ConfigMaps[o.Name] = keys
				summary.ConfigMapData[o.Name] = o.Data
			case *corev1.Secret:
				secrets[o.Name] = true
			}
			pod, ok := podOf(obj)
			if !ok {
				continue
			}
			for _, p := range checkPod(pod) {
				problems = append(problems, fmt.Sprintf("%s: %s: %s", file, object, p))
			}
			summary.Containers = append(summary.Containers, summarise(file, object, pod.Spec)...)
			needed.add(pod.Spec, fmt.Sprintf("%s: %s", file, object))
		}
	}
	for name, where := range needed.configMaps {
		if _, ok := summary.ConfigMaps[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s: ConfigMap %q is defined in none of the files", where, name))
		}
	}
	for name, where := range needed.secrets {
		if !secrets[name] && !external[name] {
			problems = append(problems, fmt.Sprintf("%s: Secret %q is defined in none of the files (made outside them? --secret %s)", where, name, name))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		fmt.Fprintln(os.Stderr, strings.Join(problems, "\n"))
		os.Exit(1)
	}
	out, _ := json.Marshal(summary)
	fmt.Println(string(out))
}
