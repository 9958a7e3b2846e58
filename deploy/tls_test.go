package deploy

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// tlsFlagPairs are the rolter flags that serve a listener over TLS, by
// the flag of the listener's address.
var tlsFlagPairs = map[string][2]string{
	"http":         {"api-tls-cert", "api-tls-key"},
	"admin":        {"admin-tls-cert", "admin-tls-key"},
	"metrics-addr": {"admin-tls-cert", "admin-tls-key"},
}

// TestTLSOverlay: in the TLS overlay every HTTP listener of every rolter
// container has a certificate and key, both from a Secret a cert-manager
// Certificate writes, through an Issuer whose CA Secret exists; the
// certificates carry the usages and names their clients need; probes and
// Prometheus speak https to those ports.
func TestTLSOverlay(t *testing.T) {
	f, ok := renders[tlsOverlayDir]
	if !ok {
		f = render(t, tlsOverlayDir)
		renders[tlsOverlayDir] = f
	}
	certFor := map[string]*Certificate{} // by Secret name
	for i := range f.Certificates {
		c := &f.Certificates[i]
		certFor[c.Spec.SecretName] = c
		if c.Namespace != f.Namespace {
			t.Errorf("Certificate %s in namespace %q, want %q", c.Name, c.Namespace, f.Namespace)
		}
		found := false
		for _, is := range f.Issuers {
			if is.Name == c.Spec.IssuerRef.Name && c.Spec.IssuerRef.Kind == "Issuer" {
				found = true
				if f.secret(is.Spec.CA.SecretName) == nil {
					t.Errorf("Issuer %s: CA Secret %q is not documented in secrets.example.yaml", is.Name, is.Spec.CA.SecretName)
				}
			}
		}
		if !found {
			t.Errorf("Certificate %s: issuer %s %q does not exist", c.Name, c.Spec.IssuerRef.Kind, c.Spec.IssuerRef.Name)
		}
		if !slices.Contains(c.Spec.Usages, "server auth") {
			t.Errorf("Certificate %s lacks the server auth usage", c.Name)
		}
	}
	n := 0
	rolterContainers(f, func(w workload, c *corev1.Container, sub string, fa flagArgs) {
		files, _ := mountedFiles(f, &w.Template.Spec, c)
		for listen, pair := range tlsFlagPairs {
			if _, ok := fa.Flags[listen]; !ok {
				continue
			}
			n++
			for _, flag := range pair {
				path, ok := fa.Flags[flag]
				if !ok {
					t.Errorf("%s/%s: --%s is served without --%s", w.Name, c.Name, listen, flag)
					continue
				}
				secret := mountedSecret(&w.Template.Spec, c, path)
				cert := certFor[secret]
				if cert == nil {
					t.Errorf("%s/%s: --%s=%s is not from a Secret a Certificate writes (mounted: %v)", w.Name, c.Name, flag, path, keysOf(files))
					continue
				}
				if listen == "admin" && sub == "router" && !slices.Contains(cert.Spec.Usages, "client auth") {
					t.Errorf("%s/%s: the admin certificate %s lacks client auth: routers present it to each other", w.Name, c.Name, cert.Name)
				}
				if listen != "metrics-addr" && !slices.Contains(cert.Spec.DNSNames, "rolter-api."+f.Namespace+".svc") {
					t.Errorf("%s/%s: certificate %s does not name the rolter-api Service (%v)", w.Name, c.Name, cert.Name, cert.Spec.DNSNames)
				}
			}
		}
		for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if p != nil && p.HTTPGet != nil && p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Errorf("%s/%s: %s probe on a TLS port uses %q", w.Name, c.Name, kind, p.HTTPGet.Scheme)
			}
		}
	})
	if n < 3 {
		t.Fatalf("checked %d listeners, want the routers' API and admin and the sidecars' metrics", n)
	}
	if len(f.ServiceMonitors) == 0 {
		t.Fatal("no ServiceMonitor rendered")
	}
	for _, sm := range f.ServiceMonitors {
		for _, ep := range sm.Spec.Endpoints {
			if ep.Scheme != "https" || ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil || ep.TLSConfig.ServerName == "" {
				t.Errorf("ServiceMonitor %s port %s: scrapes without TLS or without verifying the CA", sm.Name, ep.Port)
				continue
			}
			cert := certFor[ep.TLSConfig.CA.Secret.Name]
			if cert == nil || ep.TLSConfig.CA.Secret.Key != "ca.crt" {
				t.Errorf("ServiceMonitor %s: CA from %s/%s, not a Certificate's ca.crt", sm.Name, ep.TLSConfig.CA.Secret.Name, ep.TLSConfig.CA.Secret.Key)
			} else if !slices.Contains(cert.Spec.DNSNames, ep.TLSConfig.ServerName) {
				t.Errorf("ServiceMonitor %s: server name %q is not in certificate %s (%v)", sm.Name, ep.TLSConfig.ServerName, cert.Name, cert.Spec.DNSNames)
			}
		}
	}
}

// mountedSecret names the Secret whose volume c mounts at path's directory.
func mountedSecret(pod *corev1.PodSpec, c *corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

// TestGossipIdentityOverlay: in the TLS overlay every rolter container
// that gossips signs with a certificate of its own: --gossip-tls-cert,
// -key and -ca come from a cert-manager csi volume issued by an Issuer the
// overlay defines, whose common name is the pod name, which is also the
// container's --node-id (the member name must be the certificate's), and
// whose URI SAN grants the container's role (rolter:router or
// rolter:sidecar).
func TestGossipIdentityOverlay(t *testing.T) {
	f, ok := renders[tlsOverlayDir]
	if !ok {
		f = render(t, tlsOverlayDir)
		renders[tlsOverlayDir] = f
	}
	n := 0
	rolterContainers(f, func(w workload, c *corev1.Container, sub string, fa flagArgs) {
		if _, ok := fa.Flags["gossip"]; !ok {
			return
		}
		n++
		var rawNodeID string
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--node-id="); ok {
				rawNodeID = v
			}
		}
		if rawNodeID != "$(POD_NAME)" {
			t.Errorf("%s/%s: --node-id=%q, want $(POD_NAME), the certificate's common name", w.Name, c.Name, rawNodeID)
		}
		for _, flag := range []string{"gossip-tls-cert", "gossip-tls-key", "gossip-tls-ca"} {
			path, ok := fa.Flags[flag]
			if !ok {
				t.Errorf("%s/%s: gossips without --%s", w.Name, c.Name, flag)
				continue
			}
			v := mountedVolume(&w.Template.Spec, c, path)
			if v == nil || v.CSI == nil || v.CSI.Driver != certManagerCSI {
				t.Errorf("%s/%s: --%s=%s is not from a cert-manager csi volume", w.Name, c.Name, flag, path)
				continue
			}
			attrs := v.CSI.VolumeAttributes
			if attrs["csi.cert-manager.io/common-name"] != "${POD_NAME}" {
				t.Errorf("%s/%s: gossip certificate common name %q, want ${POD_NAME}", w.Name, c.Name, attrs["csi.cert-manager.io/common-name"])
			}
			if want := "rolter:" + sub; attrs["csi.cert-manager.io/uri-sans"] != want {
				t.Errorf("%s/%s: gossip certificate URI SANs %q, want %q: the role it may speak as", w.Name, c.Name,
					attrs["csi.cert-manager.io/uri-sans"], want)
			}
			if !slices.ContainsFunc(f.Issuers, func(is Issuer) bool { return is.Name == attrs["csi.cert-manager.io/issuer-name"] }) ||
				attrs["csi.cert-manager.io/issuer-kind"] != "Issuer" {
				t.Errorf("%s/%s: gossip certificate issuer %s %q is not an Issuer of the overlay", w.Name, c.Name,
					attrs["csi.cert-manager.io/issuer-kind"], attrs["csi.cert-manager.io/issuer-name"])
			}
		}
	})
	if n < 2 {
		t.Fatalf("checked %d gossiping containers, want the routers and the sidecars", n)
	}
}

// mountedVolume is the volume c mounts at path's directory.
func mountedVolume(pod *corev1.PodSpec, c *corev1.Container, path string) *corev1.Volume {
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == m.Name {
				return &pod.Volumes[i]
			}
		}
	}
	return nil
}
