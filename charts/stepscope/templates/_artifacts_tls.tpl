{{- /*
The artifact endpoint's certificate. Users reach the endpoint from outside the cluster (a
port-forward, an Ingress, a LoadBalancer), so its certificate may need names beyond the
in-cluster Service's: artifacts.tls.extraDnsNames and extraIpAddresses are added to the chart's
generated serving certificate (templates/webhook.yaml), or artifacts.tls.existingSecret serves
the endpoint with a pair the cluster's own issuer keeps.
*/ -}}

{{- /* Where the operator reads the endpoint's tls.crt and tls.key. */ -}}
{{- define "stepscope.artifactsTLSDir" -}}
{{- if .Values.artifacts.tls.existingSecret -}}
/var/run/secrets/stepscope/artifacts-tls
{{- else -}}
/var/run/secrets/stepscope/webhook-tls
{{- end -}}
{{- end -}}

{{- /*
Refuse values that would render a certificate without the names the installer asked for, with
the value to fix; helm's own errors for these name neither the value nor the fix.
*/ -}}
{{- define "stepscope.checkArtifactsTLS" -}}
{{- $tls := .Values.artifacts.tls }}
{{- range $key := list "extraDnsNames" "extraIpAddresses" }}
{{- if not (kindIs "slice" (index $tls $key)) }}
{{- fail (printf "artifacts.tls.%s must be a list, e.g. [%s], got %v" $key (ternary "stepscope.example.com" "127.0.0.1" (eq $key "extraDnsNames")) (index $tls $key)) }}
{{- end }}
{{- end }}
{{- $ipv4 := "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$" }}
{{- range $i, $name := $tls.extraDnsNames }}
{{- /* Clients match an address only against IP entries, so a dotted quad here would never match. */ -}}
{{- if regexMatch $ipv4 (toString $name) }}
{{- fail (printf "artifacts.tls.extraDnsNames[%d] %q is an IP address: clients match addresses only against IP entries, so put it in artifacts.tls.extraIpAddresses" $i (toString $name)) }}
{{- end }}
{{- if not (regexMatch "^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" (toString $name)) }}
{{- fail (printf "artifacts.tls.extraDnsNames[%d] %q is not a DNS name: use lowercase letters, digits, '-' and '.' (an IP address goes in artifacts.tls.extraIpAddresses)" $i (toString $name)) }}
{{- end }}
{{- end }}
{{- range $i, $ip := $tls.extraIpAddresses }}
{{- if not (or (regexMatch $ipv4 (toString $ip)) (regexMatch "^[0-9a-fA-F:]*:[0-9a-fA-F:.]*$" (toString $ip))) }}
{{- fail (printf "artifacts.tls.extraIpAddresses[%d] %q is not an IPv4 or IPv6 address (a host name goes in artifacts.tls.extraDnsNames)" $i (toString $ip)) }}
{{- end }}
{{- end }}
{{- if $tls.existingSecret }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" (toString $tls.existingSecret)) }}
{{- fail (printf "artifacts.tls.existingSecret %q is not a Secret name (lowercase letters, digits, '-' and '.')" (toString $tls.existingSecret)) }}
{{- end }}
{{- if or $tls.extraDnsNames $tls.extraIpAddresses }}
{{- fail "artifacts.tls.extraDnsNames and extraIpAddresses name the chart's generated certificate, which the artifact endpoint does not use while artifacts.tls.existingSecret is set: put the names in that Secret's certificate and leave these empty" }}
{{- end }}
{{- end }}
{{- end -}}
