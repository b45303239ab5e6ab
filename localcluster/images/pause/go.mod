module disttrain.dev/localcluster/pause

go 1.21
