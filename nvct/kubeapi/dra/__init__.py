"""The kubelet's DRA plugin service in the two versions the kubelet speaks: ``dra_v1``
(Kubernetes 1.34+) and ``dra_v1beta1`` (1.32, 1.33; later kubelets still accept it)."""
