"""The lab's API server side: what kube-apiserver does between the wire and etcd.

server (HTTP routes, list/watch), store (objects, resourceVersions, graceful deletion,
garbage collection), discovery and openapi (what kubectl reads first), schema (unknown
fields), defaults, admission (the write chain and its plugins), clusterip (Service
addresses), validation, patch and apply (PATCH bodies, server-side apply), fields
(field selectors), status (error bodies), table (kubectl get columns), eviction and
admission_webhook (pods/eviction), podproxy (pods/proxy) and tls (its certificate).
"""
