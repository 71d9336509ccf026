// A client_golang service of the size real ones reach (about 50 MB with DWARF):
// forty AWS SDK service clients linked in beside a counter, for bench/startup.py's
// large-binary arms. Built from Debian's Go sources (GOPATH=/usr/share/gocode).
package main

import (
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/aws/aws-sdk-go/service/accessanalyzer"
	"github.com/aws/aws-sdk-go/service/account"
	"github.com/aws/aws-sdk-go/service/acm"
	"github.com/aws/aws-sdk-go/service/acmpca"
	"github.com/aws/aws-sdk-go/service/alexaforbusiness"
	"github.com/aws/aws-sdk-go/service/amplify"
	"github.com/aws/aws-sdk-go/service/amplifybackend"
	"github.com/aws/aws-sdk-go/service/amplifyuibuilder"
	"github.com/aws/aws-sdk-go/service/apigateway"
	"github.com/aws/aws-sdk-go/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go/service/apigatewayv2"
	"github.com/aws/aws-sdk-go/service/appconfig"
	"github.com/aws/aws-sdk-go/service/appconfigdata"
	"github.com/aws/aws-sdk-go/service/appflow"
	"github.com/aws/aws-sdk-go/service/appintegrationsservice"
	"github.com/aws/aws-sdk-go/service/applicationautoscaling"
	"github.com/aws/aws-sdk-go/service/applicationcostprofiler"
	"github.com/aws/aws-sdk-go/service/applicationdiscoveryservice"
	"github.com/aws/aws-sdk-go/service/applicationinsights"
	"github.com/aws/aws-sdk-go/service/appmesh"
	"github.com/aws/aws-sdk-go/service/appregistry"
	"github.com/aws/aws-sdk-go/service/apprunner"
	"github.com/aws/aws-sdk-go/service/appstream"
	"github.com/aws/aws-sdk-go/service/appsync"
	"github.com/aws/aws-sdk-go/service/athena"
	"github.com/aws/aws-sdk-go/service/auditmanager"
	"github.com/aws/aws-sdk-go/service/augmentedairuntime"
	"github.com/aws/aws-sdk-go/service/autoscaling"
	"github.com/aws/aws-sdk-go/service/autoscalingplans"
	"github.com/aws/aws-sdk-go/service/backup"
	"github.com/aws/aws-sdk-go/service/backupgateway"
	"github.com/aws/aws-sdk-go/service/backupstorage"
	"github.com/aws/aws-sdk-go/service/batch"
	"github.com/aws/aws-sdk-go/service/billingconductor"
	"github.com/aws/aws-sdk-go/service/braket"
	"github.com/aws/aws-sdk-go/service/budgets"
	"github.com/aws/aws-sdk-go/service/chime"
	"github.com/aws/aws-sdk-go/service/chimesdkidentity"
	"github.com/aws/aws-sdk-go/service/chimesdkmediapipelines"
	"github.com/aws/aws-sdk-go/service/chimesdkmeetings"
)

// Linked in: each package's client constructor.
var clients = []interface{}{
	accessanalyzer.New,
	account.New,
	acm.New,
	acmpca.New,
	alexaforbusiness.New,
	amplify.New,
	amplifybackend.New,
	amplifyuibuilder.New,
	apigateway.New,
	apigatewaymanagementapi.New,
	apigatewayv2.New,
	appconfig.New,
	appconfigdata.New,
	appflow.New,
	appintegrationsservice.New,
	applicationautoscaling.New,
	applicationcostprofiler.New,
	applicationdiscoveryservice.New,
	applicationinsights.New,
	appmesh.New,
	appregistry.New,
	apprunner.New,
	appstream.New,
	appsync.New,
	athena.New,
	auditmanager.New,
	augmentedairuntime.New,
	autoscaling.New,
	autoscalingplans.New,
	backup.New,
	backupgateway.New,
	backupstorage.New,
	batch.New,
	billingconductor.New,
	braket.New,
	budgets.New,
	chime.New,
	chimesdkidentity.New,
	chimesdkmediapipelines.New,
	chimesdkmeetings.New,
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve /metrics on")
	flag.Parse()
	requests := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "large_requests_total", Help: "Ticks of the loop."})
	prometheus.MustRegister(requests)
	fmt.Println("clients linked:", len(clients))
	go func() {
		for range time.Tick(10 * time.Millisecond) {
			requests.Inc()
		}
	}()
	http.Handle("/metrics", promhttp.Handler())
	if err := http.ListenAndServe(*listen, nil); err != nil {
		fmt.Println(err)
	}
}
